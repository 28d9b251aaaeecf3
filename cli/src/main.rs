//! The `holdfast` binary: parses flags, wires the crates. Nothing else.

mod client;
mod database;
#[cfg(feature = "demo")]
mod demo;
mod endpoints;
mod keys;
mod local_machine;
mod maintenance;
mod prices;
mod projects;
mod run_worker;
mod serve_api;
mod server;
mod signals;
mod up;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;
use holdfast_machine::command as machine;
use holdfast_outbound as outbound;
use holdfast_telemetry::Telemetry;
use holdfast_wire::api::approvals::Decision;

use database::DatabaseArgs;
use server::{Server, ServerCommand};

/// Holdfast: a durable runtime for LLM agents on PostgreSQL.
#[derive(Parser)]
#[command(name = "holdfast", version = env!("VERSION_WITH_COMMIT"))]
struct Cli {
    /// Log filter (e.g. `info`, `holdfast=debug`); default `info`, and
    /// `warn` for the demo and the client commands, whose output is for people.
    #[arg(long = "log", env = "HOLDFAST_LOG", global = true)]
    log: Option<String>,
    /// Log as JSON lines.
    #[arg(long = "log-json", global = true)]
    log_json: bool,
    /// A PEM file of CA certificates to trust for outbound HTTPS (model
    /// providers, MCP servers, webhooks, web_fetch, web_search, wake URLs,
    /// the OTLP collector, the API), on top of the operating system's.
    #[arg(long = "ca-bundle", env = "HOLDFAST_CA_BUNDLE", global = true)]
    ca_bundle: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one server role in this process: the HTTP API, a worker or
    /// maintenance.
    Server {
        #[command(subcommand)]
        role: ServerCommand,
    },
    /// The machine daemon: runs commands for agents on this machine.
    Machine(MachineGroup),
    /// Run everything on one host: API, workers, maintenance (embedded
    /// Postgres by default). Applies pending migrations at start.
    Up(Box<Server<up::UpArgs>>),
    /// A self-contained showcase: a crash mid-answer and the recovery (no API key, no network).
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// Apply the SQL migrations in sql/ (idempotent; safe to run concurrently).
    Migrate(DatabaseArgs),
    /// Queue overview: agents by state, leases by worker, stuck agents.
    Status(StatusArgs),
    /// Create, list or revoke API keys.
    Keys(Admin<keys::KeysCommand>),
    /// The operator's per-project switches: custom model URLs, server
    /// tools, a cap on running agents, event retention.
    Projects(Admin<projects::ProjectsCommand>),
    /// Add, list or remove the operator's model endpoints (`model.endpoint`).
    Endpoints(Admin<endpoints::EndpointsCommand>),
    /// Set, list or remove the operator's model prices (the cost in usage).
    Prices(Admin<prices::PricesCommand>),
    /// Create, list, show, cancel and archive agents.
    Agents {
        #[command(subcommand)]
        command: client::AgentsCommand,
    },
    /// Send a message to an agent, with an Idempotency-Key.
    Send(client::SendArgs),
    /// Follow an agent's timeline live (resumes after reconnects).
    Tail(client::TailArgs),
    /// What waits on you: pending approvals, questions and custom tool calls.
    Pending(client::PendingArgs),
    /// Approve a tool call that needs approval.
    Approve(client::DecideArgs),
    /// Deny a tool call that needs approval.
    Deny(client::DecideArgs),
    /// Answer an agent's question.
    Answer(client::AnswerArgs),
    /// Post a custom tool call's result.
    Result(client::ResultArgs),
    /// List an agent's waiting inputs, take back a queued one.
    Inputs {
        #[command(subcommand)]
        command: client::InputsCommand,
    },
    /// Replay many agents' recorded turns with a config change, a few at a
    /// time, and print how each replay compares with its source: turns
    /// equal, diverged, tokens and cost before and after. Tool calls are
    /// answered from the recordings: nothing runs.
    Replay(client::replay::ReplayArgs),
    /// Register, list and delete machines, give them new tokens.
    Machines {
        #[command(subcommand)]
        command: client::MachinesCommand,
    },
    /// Print a completion script for a shell, e.g.
    /// `holdfast completions bash > ~/.local/share/bash-completion/completions/holdfast`.
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// Print this CLI's reference in Markdown (docs/reference/cli.md).
    #[command(hide = true)]
    CliReference,
    /// The old name of `server api`.
    #[command(hide = true)]
    Api(Server<serve_api::ApiArgs>),
    /// The old name of `server worker`.
    #[command(hide = true)]
    Worker(Server<run_worker::WorkerArgs>),
    /// The old name of `server maintenance`.
    #[command(hide = true)]
    Maintenance(Server<maintenance::MaintenanceArgs>),
}

/// `holdfast machine run`. Its old form, `holdfast machine FLAGS`, still
/// runs the daemon for one release (its flags are hidden from the help).
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct MachineGroup {
    #[command(subcommand)]
    command: Option<MachineCommand>,
    #[command(flatten)]
    old_form: machine::MachineArgs,
}

#[derive(Subcommand)]
enum MachineCommand {
    /// Run the machine daemon until SIGTERM/SIGINT: claim this machine's
    /// commands over HTTP (with its token) and run them. Needs no database.
    Run(machine::MachineArgs),
}

/// An administration command: the database, then what to do.
#[derive(Args)]
struct Admin<Action: Subcommand> {
    #[command(flatten)]
    database: DatabaseArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// One JSON document: {"queue_depth", "workers", "stuck_agents"}.
    #[arg(long)]
    json: bool,
}

/// The top-level commands under the headings of `holdfast --help`.
const COMMAND_GROUPS: &[(&str, &[&str])] = &[
    (
        "Server roles",
        &["server", "machine", "up", "demo", "migrate"],
    ),
    (
        "Administration (on the database, which they never migrate)",
        &["status", "keys", "projects", "endpoints", "prices"],
    ),
    (
        "Client (over HTTP: --url, --api-key)",
        &[
            "agents", "send", "tail", "pending", "approve", "deny", "answer", "result", "inputs",
            "replay", "machines",
        ],
    ),
    ("Shell", &["completions"]),
];

/// The command line as parsed: [`Cli`], with the old form of `machine`
/// hidden from the help and the top-level commands listed by group.
fn parser() -> clap::Command {
    let parser = Cli::command().mut_subcommands(|command| match command.get_name() {
        "machine" => command.mut_args(|arg| arg.hide(true)),
        _ => command,
    });
    let width = COMMAND_GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter().map(|name| name.len()))
        .max()
        .unwrap_or_default();
    let mut listing = String::new();
    for (heading, names) in COMMAND_GROUPS {
        listing.push_str(&format!("{heading}:\n"));
        // A command left out of this build (`demo` without its feature) is
        // not listed.
        for name in names
            .iter()
            .filter(|name| parser.find_subcommand(name).is_some())
        {
            let about = parser
                .find_subcommand(name)
                .and_then(|command| command.get_about())
                .map(ToString::to_string)
                .unwrap_or_default();
            listing.push_str(&format!("  {name:<width$}  {about}\n"));
        }
        listing.push('\n');
    }
    // clap lists subcommands flat; this template lists them by group, the
    // rest as clap would.
    parser.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}\
         `holdfast help COMMAND` (or COMMAND --help) describes each.\n\n\
         Options:\n{{options}}"
    ))
}

/// An old name still works for one release; this says so on stderr, in
/// one line naming the new one.
pub fn deprecated(old: &str, new: &str) {
    eprintln!(
        "warning: `holdfast {old}` is deprecated and will be removed in the next release; use `holdfast {new}`"
    );
}

/// Errors end the process with one line on stderr, causes joined by ": "
/// (a connection error names what failed: TLS, certificate, password,
/// host, database), and exit status 1.
fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&parser().get_matches()).unwrap_or_else(|e| e.exit());
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let speaks_to_people = is_demo(&cli.command)
        || matches!(
            cli.command,
            Command::Agents { .. }
                | Command::Send(_)
                | Command::Tail(_)
                | Command::Pending(_)
                | Command::Approve(_)
                | Command::Deny(_)
                | Command::Answer(_)
                | Command::Result(_)
                | Command::Inputs { .. }
                | Command::Machines { .. }
                | Command::Replay(_)
                | Command::Completions { .. }
                | Command::CliReference
        );
    let default_log = if speaks_to_people { "warn" } else { "info" };
    init_tracing(cli.log.as_deref().unwrap_or(default_log), cli.log_json);
    // The crypto provider and the trust store, before anything connects.
    outbound::crypto_provider();
    let trust = outbound::configure(cli.ca_bundle.as_deref())?;
    if let Some(bundle) = &trust.bundle {
        tracing::info!(
            bundle = %bundle.display(),
            bundle_roots = trust.bundle_roots,
            system_roots = trust.system_roots,
            "outbound HTTPS trusts the operating system's roots and the CA bundle"
        );
    }
    // Before the runtime: the exporter's blocking HTTP client must not be
    // built on one. Only workers (steps), maintenance (webhook deliveries)
    // and machine daemons (commands) make spans (docs/api.md, "Tracing").
    let telemetry = if matches!(
        cli.command,
        Command::Server {
            role: ServerCommand::Worker(_) | ServerCommand::Maintenance(_)
        } | Command::Worker(_)
            | Command::Maintenance(_)
            | Command::Up(_)
            | Command::Machine(_)
    ) {
        Telemetry::from_env(|name| std::env::var(name).ok())?
    } else {
        Telemetry::disabled()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(dispatch(cli.command));
    // The spans of the last steps (a worker drained by SIGTERM) go out now.
    telemetry.shutdown();
    result
}

async fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Server { role } => server::run(role).await,
        Command::Api(args) => {
            deprecated("api", "server api");
            server::run(ServerCommand::Api(args)).await
        }
        Command::Worker(args) => {
            deprecated("worker", "server worker");
            server::run(ServerCommand::Worker(args)).await
        }
        Command::Maintenance(args) => {
            deprecated("maintenance", "server maintenance");
            server::run(ServerCommand::Maintenance(args)).await
        }
        // The daemon runs on a user's machine and speaks HTTP only: it
        // never opens, let alone starts, a database.
        Command::Machine(group) => machine::run(group.daemon_args()).await,
        Command::Up(up) => {
            let egress = up.egress.policy()?;
            up::run(up.database.open_here().await?, up.role, egress).await
        }
        // The demo brings its own Postgres.
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(args).await,
        Command::Migrate(database) => {
            let applied = database.open().await?.migrate().await?;
            if applied.is_empty() {
                println!("schema is up to date");
            } else {
                for name in applied {
                    println!("applied {name}");
                }
            }
            Ok(())
        }
        Command::Status(args) => {
            database::print_status(&args.database.open_current().await?, args.json).await
        }
        Command::Keys(admin) => {
            keys::run(&admin.database.open_current().await?, admin.action).await
        }
        Command::Projects(admin) => {
            projects::run(&admin.database.open_current().await?, admin.action).await
        }
        Command::Endpoints(admin) => {
            endpoints::run(&admin.database.open_current().await?, admin.action).await
        }
        Command::Prices(admin) => {
            prices::run(&admin.database.open_current().await?, admin.action).await
        }
        Command::Agents { command } => client::agents(command).await,
        Command::Send(args) => client::send(args).await,
        Command::Tail(args) => client::tail(args).await,
        Command::Pending(args) => client::pending(args).await,
        Command::Approve(args) => client::decide(args, Decision::Approve).await,
        Command::Deny(args) => client::decide(args, Decision::Deny).await,
        Command::Answer(args) => client::answer(args).await,
        Command::Result(args) => client::result(args).await,
        Command::Inputs { command } => client::inputs(command).await,
        Command::Machines { command } => client::machines(command).await,
        Command::Replay(args) => client::replay::replay(args).await,
        Command::Completions { shell } => {
            // Into a buffer first: the generator panics on a failed write
            // (a closed pipe), and an error should say so instead.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut parser(), "holdfast", &mut script);
            std::io::stdout().write_all(&script)?;
            Ok(())
        }
        Command::CliReference => {
            print!("{}", cli_reference());
            Ok(())
        }
    }
}

impl MachineGroup {
    /// The daemon's flags: `machine run`'s, or the old form's (with a note).
    /// `--api`, the old name of `--url`, gets a note too.
    fn daemon_args(self) -> machine::MachineArgs {
        let args = match self.command {
            Some(MachineCommand::Run(args)) => args,
            None => {
                deprecated("machine", "machine run");
                self.old_form
            }
        };
        let old_url_flag = std::env::args_os()
            .take_while(|arg| arg != "--")
            .any(|arg| arg == "--api" || arg.to_string_lossy().starts_with("--api="));
        if old_url_flag {
            deprecated("machine run --api", "machine run --url");
        }
        args
    }
}

/// docs/reference/cli.md: every visible command, flag and argument, from
/// the parser itself (regenerate: `cargo run -q -p holdfast -- cli-reference
/// > docs/reference/cli.md`).
fn cli_reference() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("CLI reference".to_owned())
        .show_footer(false);
    // The groups of `holdfast --help`, which the page would not show
    // otherwise (they are in the help's template, not the parser).
    let groups: Vec<String> = COMMAND_GROUPS
        .iter()
        .map(|(heading, names)| {
            let names: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
            format!("**{heading}:** {}", names.join(", "))
        })
        .collect();
    let parser = parser().after_long_help(format!(
        "{}\n\nThe environment variable of each flag, and what the server settings \
         mean in depth: docs/configuration.md.",
        groups.join("\n\n")
    ));
    clap_markdown::help_markdown_command_custom(&parser, &options)
}

/// True for `holdfast demo` (a command only a build with the `demo`
/// feature has).
#[cfg(feature = "demo")]
fn is_demo(command: &Command) -> bool {
    matches!(command, Command::Demo(_))
}

#[cfg(not(feature = "demo"))]
fn is_demo(_: &Command) -> bool {
    false
}

fn init_tracing(filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Every visible command under `command` (itself included), with its
    /// path from the top (`holdfast server api`).
    fn visible_commands(
        command: &clap::Command,
        path: String,
        out: &mut Vec<(String, clap::Command)>,
    ) {
        for sub in command.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            visible_commands(sub, format!("{path} {}", sub.get_name()), out);
        }
        out.push((path, command.clone()));
    }

    fn all_commands() -> Vec<(String, clap::Command)> {
        let mut parser = parser();
        parser.build();
        let mut out = Vec::new();
        visible_commands(&parser, "holdfast".into(), &mut out);
        out
    }

    /// The visible flags and positionals of `command`, without the ones
    /// clap adds (`--help`, `--version`).
    fn own_args(command: &clap::Command) -> Vec<&clap::Arg> {
        command
            .get_arguments()
            .filter(|arg| !arg.is_hide_set())
            .filter(|arg| !["help", "version"].contains(&arg.get_id().as_str()))
            .collect()
    }

    #[test]
    fn every_visible_command_is_in_one_group_of_the_help() {
        let mut grouped: Vec<&str> = COMMAND_GROUPS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
        grouped.sort_unstable();
        let parser = Cli::command();
        let mut visible: Vec<&str> = parser
            .get_subcommands()
            .filter(|command| !command.is_hide_set())
            .map(|command| command.get_name())
            .collect();
        visible.sort_unstable();
        assert_eq!(grouped, visible, "each visible command, in one group");
    }

    #[test]
    fn every_flag_and_positional_has_help() {
        let mut missing = Vec::new();
        for (path, command) in all_commands() {
            if command.get_about().is_none() {
                missing.push(path.clone());
            }
            for arg in own_args(&command) {
                if arg
                    .get_help()
                    .is_none_or(|help| help.to_string().trim().is_empty())
                {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "without help: {missing:?}");
    }

    /// The client commands speak HTTP only: none shows a flag of the
    /// database, of egress or of a server role.
    #[test]
    fn client_commands_show_no_server_flags() {
        let client_nouns = [
            "agents", "send", "tail", "pending", "approve", "deny", "answer", "result", "inputs",
            "machines",
        ];
        let server_only = ["database-url", "egress-allow", "listen", "concurrency"];
        let mut leaked = Vec::new();
        for (path, command) in all_commands() {
            let noun = path.split(' ').nth(1).unwrap_or_default();
            if !client_nouns.contains(&noun) {
                continue;
            }
            for arg in own_args(&command) {
                if arg
                    .get_long()
                    .is_some_and(|long| server_only.contains(&long))
                {
                    leaked.push(format!("{path} --{}", arg.get_long().unwrap()));
                }
            }
        }
        assert!(
            leaked.is_empty(),
            "server flags on client commands: {leaked:?}"
        );
        // And the server and administration commands do have their database.
        for path in [
            "holdfast server api",
            "holdfast up",
            "holdfast keys create",
            "holdfast status",
        ] {
            let (_, command) = all_commands()
                .into_iter()
                .find(|(p, _)| p == path)
                .unwrap_or_else(|| panic!("no {path}"));
            assert!(
                own_args(&command)
                    .iter()
                    .any(|arg| arg.get_long() == Some("database-url")),
                "{path} has no --database-url"
            );
        }
    }

    /// A setting read from one environment variable has one flag name
    /// wherever it appears (`--url` for HOLDFAST_URL, on the client and
    /// the daemon alike).
    #[test]
    fn one_flag_name_per_setting() {
        let mut names: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for (path, command) in all_commands() {
            for arg in own_args(&command) {
                let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                    continue;
                };
                names
                    .entry(env.to_string_lossy().into_owned())
                    .or_default()
                    .entry(long.to_owned())
                    .or_default()
                    .push(path.clone());
            }
        }
        let split: Vec<_> = names.iter().filter(|(_, longs)| longs.len() > 1).collect();
        assert!(
            split.is_empty(),
            "one variable, several flag names: {split:?}"
        );
        assert_eq!(
            names["HOLDFAST_URL"].keys().collect::<Vec<_>>(),
            ["url"],
            "the API's URL is --url everywhere"
        );
    }
}
