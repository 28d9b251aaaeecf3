//! Human output of the client CLI: one line per saved event, live text
//! inline as it streams, and next to everything that waits on you the
//! command that answers it.

use std::io::Write;

use holdfast_client::follow::SavedEvent;
use holdfast_wire::api::agents::AgentView;
use holdfast_wire::api::inputs::InputView;
use holdfast_wire::api::machines::MachineView;
use serde_json::Value;

use super::Pending;

/// Prints a stream as a timeline. Live deltas of a model call are written
/// inline after `▸`; the saved event that follows starts on a new line.
#[derive(Default)]
pub struct Timeline {
    /// A line of deltas is open (and the model's text has been shown).
    streaming: bool,
}

impl Timeline {
    pub fn delta(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        if !self.streaming {
            let _ = write!(out, "{:>6}  {:<20} ▸ ", "", "streaming");
            self.streaming = true;
        }
        let _ = write!(out, "{}", text.replace('\n', " "));
        let _ = out.flush();
    }

    /// End an open line of deltas.
    pub fn break_line(&mut self) {
        if self.streaming {
            println!();
            self.streaming = false;
        }
    }

    pub fn saved(&mut self, event: &SavedEvent) {
        let streamed = self.streaming;
        self.break_line();
        let line = format!(
            "{:>6}  {:<20} {}",
            format!("#{}", event.seq),
            event.kind,
            describe(event, streamed)
        );
        println!("{}", line.trim_end());
    }
}

/// One line about a saved event; `streamed`: its text was just shown live.
fn describe(event: &SavedEvent, streamed: bool) -> String {
    let d = &event.data;
    match event.kind.as_str() {
        "input.received" => content_text(&d["content"]),
        "model.response" => {
            let text = message_text(&d["message"]);
            let calls: Vec<String> = d["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{} {}", c["name"].as_str().unwrap_or("?"), c["input"]))
                .collect();
            let mut line = if streamed || text.is_empty() {
                String::new()
            } else {
                quote(&text)
            };
            if !calls.is_empty() {
                if !line.is_empty() {
                    line.push_str(" · ");
                }
                line.push_str(&format!("calls {}", calls.join(", ")));
            }
            line
        }
        "tool_call.created" => {
            let id = d["id"].as_str().unwrap_or("?");
            let mut line = format!(
                "{} {} ({}, {})",
                d["name"].as_str().unwrap_or("?"),
                d["input"],
                d["kind"].as_str().unwrap_or("?"),
                d["status"].as_str().unwrap_or("?")
            );
            if d["kind"] == "custom" && d["status"] == "waiting" {
                line.push_str(&format!("  → holdfast result {id} '<json>'"));
            }
            line
        }
        "approval.requested" => {
            let id = d["approval_id"].as_str().unwrap_or("?");
            format!(
                "{} {}  → holdfast approve {id} | holdfast deny {id}",
                d["name"].as_str().unwrap_or("?"),
                d["input"]
            )
        }
        "approval.answered" => format!(
            "{} by {}",
            d["decision"].as_str().unwrap_or("?"),
            d["by"].as_str().unwrap_or("?")
        ),
        "question.asked" => format!(
            "{}  → holdfast answer {} \"…\"",
            quote(d["question"].as_str().unwrap_or_default()),
            d["question_id"].as_str().unwrap_or("?")
        ),
        "question.answered" => format!(
            "{} by {}",
            quote(d["answer"].as_str().unwrap_or_default()),
            d["by"].as_str().unwrap_or("?")
        ),
        "tool_call.completed" | "tool_call.interrupted" => format!(
            "{} {} {}",
            d["name"].as_str().unwrap_or("?"),
            if d["is_error"] == true { "✗" } else { "✓" },
            // A large output is only previewed in its event.
            match d["output_preview"].as_str() {
                Some(preview) => shorten(preview, 100),
                None => shorten(&d["output"].to_string(), 100),
            }
        ),
        "model.retry" | "step.retry" => format!(
            "attempt {} in {} ms: {}",
            d["attempt"],
            d["delay_ms"],
            d["error"]["message"].as_str().unwrap_or("?")
        ),
        "turn.failed" => format!(
            "{}: {}",
            d["error"]["type"].as_str().unwrap_or("?"),
            d["error"]["message"].as_str().unwrap_or("?")
        ),
        "turn.completed" | "turn.started" | "turn.cancelled" => String::new(),
        _ => shorten(&d.to_string(), 100),
    }
}

pub fn agent_created(agent: &AgentView) {
    println!("agent {} created: {}", agent.id, summary(agent));
}

pub fn agent(agent: &AgentView) {
    println!("agent      {}", agent.id);
    println!("state      {}", agent.state.as_str());
    println!("config     {}", summary(agent));
    println!("turn open  {}", agent.turn_open);
    println!("last event #{}", agent.last_event_seq);
}

pub fn agent_list(agents: &[AgentView]) {
    if agents.is_empty() {
        println!("no agents");
        return;
    }
    for agent in agents {
        println!(
            "{}  {:<8}  {}",
            agent.id,
            agent.state.as_str(),
            summary(agent)
        );
    }
}

pub fn machine_list(machines: &[MachineView]) {
    if machines.is_empty() {
        println!("no machines");
        return;
    }
    for machine in machines {
        let seen = machine
            .last_heartbeat_at
            .map_or_else(|| "never".to_owned(), |at| at.to_rfc3339());
        let running = machine.running_commands.as_array().map_or(0, Vec::len);
        println!(
            "{}  {}  {}  last heartbeat {seen}  commands: {} queued, {running} running",
            machine.id,
            machine.name,
            if machine.online { "online " } else { "offline" },
            machine.queued_commands
        );
    }
}

pub fn input_list(inputs: &[InputView]) {
    if inputs.is_empty() {
        println!("no inputs waiting");
        return;
    }
    for input in inputs {
        let text = match &input.content {
            Value::String(text) => text.clone(),
            blocks => message_text(blocks),
        };
        println!(
            "{}  {:<9}  {:<7}  {}",
            input.id,
            <&str>::from(input.mode),
            <&str>::from(input.status),
            quote(&text)
        );
    }
}

/// `provider/name, tools a, b (approval: a)`.
fn summary(agent: &AgentView) -> String {
    let config = &agent.config;
    let mut line = format!(
        "{}/{}",
        config["model"]["provider"].as_str().unwrap_or("?"),
        config["model"]["name"].as_str().unwrap_or("?")
    );
    let tools: Vec<&str> = config["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["name"].as_str().or(t["type"].as_str()).unwrap_or("?"))
        .collect();
    if !tools.is_empty() {
        line.push_str(&format!(", tools {}", tools.join(", ")));
    }
    let approvals: Vec<&str> = config["approvals"]["require_for"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !approvals.is_empty() {
        line.push_str(&format!(" (approval needed: {})", approvals.join(", ")));
    }
    line
}

/// What waits, with the command that answers each.
pub fn pending(waiting: &Pending, only_if_any: bool) {
    if waiting.approvals.is_empty() && waiting.questions.is_empty() && waiting.tool_calls.is_empty()
    {
        if !only_if_any {
            println!("nothing waits on you");
        }
        return;
    }
    for a in &waiting.approvals {
        let id = a.id;
        println!(
            "approval   {id}  {}  → holdfast approve {id} | holdfast deny {id}",
            a.subject()
        );
    }
    for q in &waiting.questions {
        let id = q.id;
        println!(
            "question   {id}  {}  → holdfast answer {id} \"…\"",
            quote(&q.question)
        );
    }
    for c in &waiting.tool_calls {
        let id = c.id;
        println!(
            "tool call  {id}  {} {}  → holdfast result {id} '<json>'",
            c.name, c.input
        );
    }
}

/// An input's content as one line: the text, or its text blocks.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => quote(text),
        other => quote(&message_text(other)),
    }
}

/// The text blocks of a message, joined.
pub fn message_text(blocks: &Value) -> String {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(text: &str) -> String {
    format!("\"{}\"", shorten(&text.replace('\n', " "), 100))
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}
