//! `holdfast projects …`: the operator's per-project switches.
//! - `allow-custom-urls|deny-custom-urls NAME`: whether a project's agents
//!   may set their own `model.base_url`. Requests to such a URL carry the
//!   project's own provider key if it set one, and never an operator
//!   credential.
//! - `allow-server-tools|deny-server-tools NAME`: whether a project's
//!   agents may configure Anthropic's server tools (web search, web fetch),
//!   which run on the operator's provider account and are billed to it.
//! - `max-running NAME N|none`: a cap on the project's agents running at
//!   once (claims skip the project while it is reached).
//! - `retention NAME --events 30d|forever`: how long the project keeps its
//!   finished agents' events, webhook deliveries, tool outputs, input
//!   contents and unreferenced attachments (the maintenance process prunes
//!   them, docs/sql.md "Event retention").

use std::time::Duration;

use anyhow::Result;
use clap::Subcommand;
use holdfast_db::store;
use holdfast_wire::duration::parse_duration;

use crate::database::Database;

#[derive(Subcommand)]
pub enum ProjectsCommand {
    /// Let the project's agents set `model.base_url`.
    AllowCustomUrls {
        /// The project's name.
        project: String,
    },
    /// Refuse `model.base_url` again (agents with one fail their next model call).
    DenyCustomUrls {
        /// The project's name.
        project: String,
    },
    /// Let the project's agents configure Anthropic's server tools
    /// (`anthropic_web_search`, `anthropic_web_fetch`), billed to the
    /// operator's provider account.
    AllowServerTools {
        /// The project's name.
        project: String,
    },
    /// Refuse them again (agents with one fail their next model call).
    DenyServerTools {
        /// The project's name.
        project: String,
    },
    /// Cap how many of the project's agents run at once (`none`: no cap).
    /// Agents already running keep their leases; the cap applies to claims.
    MaxRunning {
        /// The project's name.
        project: String,
        /// The most agents running at once (0 or more), or `none`.
        #[arg(value_name = "N|none", value_parser = parse_max_running, allow_negative_numbers = true)]
        max: MaxRunning,
    },
    /// Keep the events, webhook deliveries, tool outputs, input contents and
    /// unreferenced attachments of the project's finished agents for this
    /// long (`30d`, `12h`, …; `forever`: never prune).
    Retention {
        /// The project's name.
        project: String,
        /// How long: whole days (`30d`), a duration (`12h`), or `forever`.
        #[arg(long = "events", value_parser = parse_retention)]
        events: Retention,
    },
}

/// `None` is forever (an alias, so clap takes the parser's value whole).
type Retention = Option<Duration>;

/// `forever`, whole days (`30d`), or a duration as the settings take it.
fn parse_retention(value: &str) -> Result<Retention, String> {
    if value.eq_ignore_ascii_case("forever") {
        return Ok(None);
    }
    let retention = match value.strip_suffix('d') {
        Some(days) => days
            .parse::<u64>()
            .ok()
            .and_then(|d| d.checked_mul(86_400))
            .map(Duration::from_secs)
            .ok_or_else(|| format!("expected whole days such as 30d, got {value:?}"))?,
        None => parse_duration(value)?,
    };
    if retention.is_zero() {
        return Err("retention must be positive (or `forever`)".into());
    }
    Ok(Some(retention))
}

/// `None` is no cap (an alias, so clap takes the parser's value whole).
type MaxRunning = Option<i32>;

fn parse_max_running(value: &str) -> Result<MaxRunning, String> {
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    value
        .parse::<i32>()
        .ok()
        .filter(|n| *n >= 0)
        .map(Some)
        .ok_or_else(|| format!("expected a count (0 or more) or `none`, got {value:?}"))
}

pub async fn run(db: &Database, command: ProjectsCommand) -> Result<()> {
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    match command {
        ProjectsCommand::AllowCustomUrls { project } => {
            store::set_project_custom_model_urls(&client, &project, true).await?;
            println!("agents of project {project} may set model.base_url");
        }
        ProjectsCommand::DenyCustomUrls { project } => {
            store::set_project_custom_model_urls(&client, &project, false).await?;
            println!("agents of project {project} may not set model.base_url");
        }
        ProjectsCommand::AllowServerTools { project } => {
            store::set_project_server_tools(&client, &project, true).await?;
            println!("agents of project {project} may use the provider's server tools");
        }
        ProjectsCommand::DenyServerTools { project } => {
            store::set_project_server_tools(&client, &project, false).await?;
            println!("agents of project {project} may not use the provider's server tools");
        }
        ProjectsCommand::MaxRunning { project, max } => {
            store::set_project_max_running(&client, &project, max).await?;
            match max {
                Some(max) => println!("at most {max} agents of project {project} run at once"),
                None => println!("agents of project {project} run without a cap"),
            }
        }
        ProjectsCommand::Retention { project, events } => {
            store::set_project_retention(&client, &project, events).await?;
            match events {
                Some(events) => println!(
                    "project {project} keeps finished agents' events for {}",
                    display_retention(events)
                ),
                None => println!("project {project} keeps finished agents' events forever"),
            }
        }
    }
    Ok(())
}

/// A retention as the operator wrote it back: whole days when it is whole
/// days, else seconds.
fn display_retention(d: Duration) -> String {
    let secs = d.as_secs();
    if secs.is_multiple_of(86_400) && d.subsec_nanos() == 0 {
        format!("{}d", secs / 86_400)
    } else {
        format!("{}s", d.as_secs_f64())
    }
}
