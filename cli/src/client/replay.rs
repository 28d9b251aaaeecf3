//! `holdfast replay`: replay many agents' recorded turns with one config
//! change, a few at a time, and print how each came out beside its source.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use futures::StreamExt;
use holdfast_client::Client;
use holdfast_wire::api::replays::{ReplayReport, ReplayRequest, ReplayStatus};
use holdfast_wire::domain::TokenUsage;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{print_json, Endpoint, JSON_HELP};

#[derive(Args)]
pub struct ReplayArgs {
    /// A file of the agents to replay: one agent id a line (blank lines
    /// and lines starting with `#` are skipped).
    #[arg(long = "agents-file", value_name = "FILE")]
    agents_file: PathBuf,
    /// A change of the agents' config for the replays, `PATH=VALUE`, e.g.
    /// `model.name=claude-sonnet-4-5` or `model.max_tokens=2048`: VALUE is
    /// read as JSON, and as a string when it is not JSON. Repeat for more.
    #[arg(long = "set", value_name = "PATH=VALUE", required = true)]
    set: Vec<String>,
    /// Replays running at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

/// How often a running replay's report is read.
const POLL: Duration = Duration::from_millis(500);

pub async fn replay(args: ReplayArgs) -> Result<()> {
    let patch = config_patch(&args.set)?;
    let text = std::fs::read_to_string(&args.agents_file)
        .with_context(|| format!("reading {}", args.agents_file.display()))?;
    let agents = agent_ids(&text)?;
    let api = args.endpoint.client()?;
    let request = ReplayRequest {
        config: Some(patch),
        turns: None,
        version: None,
    };
    let outcomes: Vec<(Uuid, Result<ReplayReport, String>)> = futures::stream::iter(agents)
        .map(|agent| {
            let (api, request) = (&api, &request);
            async move { (agent, replayed(api, agent, request).await) }
        })
        .buffered(usize::from(args.concurrency))
        .collect()
        .await;
    if args.json {
        print_json(&Value::Array(
            outcomes
                .iter()
                .map(|(agent, outcome)| match outcome {
                    Ok(report) => json!({"agent_id": agent, "report": report}),
                    Err(error) => json!({"agent_id": agent, "error": error}),
                })
                .collect(),
        ));
    } else {
        print!("{}", summary_table(&outcomes));
    }
    let failed = outcomes.iter().filter(|(_, o)| o.is_err()).count();
    if failed > 0 {
        bail!("{failed} of {} replays could not be run", outcomes.len());
    }
    Ok(())
}

/// Start a replay of `agent` and wait for its report.
async fn replayed(
    api: &Client,
    agent: Uuid,
    request: &ReplayRequest,
) -> Result<ReplayReport, String> {
    let mut report = api
        .create_replay(agent, request)
        .await
        .map_err(|e| e.to_string())?;
    while report.status == ReplayStatus::Running {
        tokio::time::sleep(POLL).await;
        report = api.replay(report.id).await.map_err(|e| e.to_string())?;
    }
    Ok(report)
}

/// The merge patch `PATH=VALUE` settings make.
fn config_patch(settings: &[String]) -> Result<Value> {
    let mut patch = Map::new();
    for setting in settings {
        let Some((path, value)) = setting.split_once('=') else {
            bail!("--set {setting:?}: expected PATH=VALUE, e.g. model.name=claude-sonnet-4-5");
        };
        let keys: Vec<&str> = path.split('.').collect();
        if keys.iter().any(|k| k.is_empty()) {
            bail!("--set {setting:?}: the path has an empty part");
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        let mut at = &mut patch;
        for key in &keys[..keys.len() - 1] {
            let entry = at
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                bail!("--set {setting:?}: {key} is set to a value already");
            }
            at = entry.as_object_mut().expect("checked to be an object");
        }
        at.insert(keys[keys.len() - 1].to_string(), value);
    }
    Ok(Value::Object(patch))
}

/// The agent ids of an agents file.
fn agent_ids(text: &str) -> Result<Vec<Uuid>> {
    text.lines()
        .enumerate()
        .map(|(n, line)| (n + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(n, line)| {
            line.parse()
                .with_context(|| format!("line {n}: {line:?} is not an agent id"))
        })
        .collect()
}

fn tokens(usage: &TokenUsage) -> i64 {
    usage.input_tokens + usage.output_tokens
}

fn cost(usage: &TokenUsage) -> String {
    usage
        .cost_usd
        .map_or_else(|| "-".to_owned(), |c| format!("{c:.4}"))
}

/// One line per agent, and the sums: turns equal and diverged, tokens and
/// cost of the source's turns (before) and the replay's (after).
fn summary_table(outcomes: &[(Uuid, Result<ReplayReport, String>)]) -> String {
    let mut rows = vec![[
        "agent",
        "status",
        "turns",
        "equal",
        "diverged",
        "tokens before",
        "tokens after",
        "cost before",
        "cost after",
    ]
    .map(str::to_owned)];
    let (mut turns, mut equal, mut diverged, mut before, mut after) = (0, 0, 0, 0, 0);
    for (agent, outcome) in outcomes {
        match outcome {
            Ok(report) => {
                let totals = &report.totals;
                turns += report.turns_replayed;
                equal += totals.turns_equal;
                diverged += totals.turns_diverged;
                before += tokens(&totals.source);
                after += tokens(&totals.replay);
                let status = match &report.error {
                    Some(error) => format!("failed: {}", error["type"].as_str().unwrap_or("error")),
                    None => "completed".to_owned(),
                };
                rows.push([
                    agent.to_string(),
                    status,
                    format!("{}/{}", report.turns_replayed, report.turns_total),
                    totals.turns_equal.to_string(),
                    totals.turns_diverged.to_string(),
                    tokens(&totals.source).to_string(),
                    tokens(&totals.replay).to_string(),
                    cost(&totals.source),
                    cost(&totals.replay),
                ]);
            }
            Err(error) => rows.push([
                agent.to_string(),
                format!("error: {error}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    rows.push([
        "total".to_owned(),
        String::new(),
        turns.to_string(),
        equal.to_string(),
        diverged.to_string(),
        before.to_string(),
        after.to_string(),
        String::new(),
        String::new(),
    ]);
    let widths: Vec<usize> = (0..9)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut table = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        table.push_str(cells.join("  ").trim_end());
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_make_one_nested_merge_patch() {
        let patch = config_patch(&[
            "model.name=claude-next".into(),
            "model.max_tokens=2048".into(),
            "system=Be brief.".into(),
        ])
        .unwrap();
        assert_eq!(
            patch,
            json!({"model": {"name": "claude-next", "max_tokens": 2048}, "system": "Be brief."})
        );
        assert!(config_patch(&["model".into()]).is_err());
        assert!(config_patch(&["model..name=x".into()]).is_err());
        assert!(config_patch(&["system=x".into(), "system.y=1".into()]).is_err());
    }

    #[test]
    fn an_agents_file_skips_blank_lines_and_comments_and_names_a_bad_line() {
        let id = Uuid::now_v7();
        assert_eq!(agent_ids(&format!("# a\n\n{id}\n")).unwrap(), vec![id]);
        let error = agent_ids("# a\nnot-an-id\n").unwrap_err().to_string();
        assert!(error.contains("line 2"), "{error}");
    }
}
