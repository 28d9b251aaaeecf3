//! `holdfast endpoints add|list|remove`: the operator's model endpoints,
//! managed on the database directly (like `holdfast keys`), never through
//! the tenant API. The endpoint `default` is not stored: it is each
//! worker's `ANTHROPIC_*` / `OPENAI_*` environment pair.

use anyhow::Result;
use clap::Subcommand;
use holdfast_db::store;
use holdfast_wire::domain::NewModelEndpoint;

use crate::database::Database;

#[derive(Subcommand)]
pub enum EndpointsCommand {
    /// Add a named endpoint agents select with `model.endpoint`.
    Add {
        /// Lowercase letters, digits, ".", "_" or "-" (not `default`).
        name: String,
        /// The protocol it speaks: anthropic or openai.
        #[arg(long)]
        kind: String,
        /// Its base URL (`/v1/messages` or `/chat/completions` is appended).
        #[arg(long = "base-url")]
        base_url: String,
        /// The worker's environment variable holding its credential (e.g.
        /// ANTHROPIC_API_KEY); none: no credential is sent.
        #[arg(long = "credential-env")]
        credential_env: Option<String>,
        /// Only this project may use it (default: every project).
        #[arg(long)]
        project: Option<String>,
        /// A model name allowed on it (repeat; default: any model).
        #[arg(long = "model")]
        models: Vec<String>,
    },
    /// List the endpoints.
    List {
        /// One JSON array of the stored endpoints (`default` is not stored).
        #[arg(long)]
        json: bool,
    },
    /// Remove an endpoint (agents naming it fail their next model call).
    Remove {
        /// The endpoint's name.
        name: String,
    },
}

pub async fn run(db: &Database, command: EndpointsCommand) -> Result<()> {
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    match command {
        EndpointsCommand::Add {
            name,
            kind,
            base_url,
            credential_env,
            project,
            models,
        } => {
            let endpoint = NewModelEndpoint {
                name,
                kind,
                base_url,
                credential_env,
                project,
                models,
            };
            store::add_model_endpoint(&client, &endpoint).await?;
            println!(
                "added endpoint {} ({} at {})",
                endpoint.name, endpoint.kind, endpoint.base_url
            );
        }
        EndpointsCommand::List { json } => {
            let endpoints = store::list_model_endpoints(&client).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&endpoints)?);
                return Ok(());
            }
            println!("default  the workers' ANTHROPIC_* / OPENAI_* environment, every project");
            for e in endpoints {
                println!(
                    "{}  {} {}  credential: {}  project: {}  models: {}  agents: {}",
                    e.name,
                    e.kind,
                    e.base_url,
                    e.credential_env.as_deref().unwrap_or("none"),
                    e.project.as_deref().unwrap_or("every"),
                    e.models.map_or("any".to_owned(), |m| m.join(",")),
                    e.agents
                );
            }
        }
        EndpointsCommand::Remove { name } => {
            let agents = store::remove_model_endpoint(&client, &name).await?;
            println!("removed endpoint {name}");
            if agents > 0 {
                eprintln!(
                    "{agents} agent(s) still name it: their model calls fail until they name another endpoint"
                );
            }
        }
    }
    Ok(())
}
