//! `holdfast keys create|list|revoke`: API keys, stored hashed. A new key
//! is printed once, alone on the last line of stdout, so scripts can capture
//! it with `tail -n1`.

use anyhow::Result;
use clap::Subcommand;
use holdfast_db::store;

use crate::database::Database;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create a key for a project (the project is created if needed).
    Create {
        /// The project's name: letters, digits, ".", "_" or "-".
        #[arg(long)]
        project: String,
    },
    /// List the keys, revoked ones included, oldest first (never the keys
    /// themselves: only their hashes are stored).
    List {
        /// Only this project's keys.
        #[arg(long)]
        project: Option<String>,
        /// One JSON array of {"key_id", "project", "prefix", "created_at",
        /// "revoked_at"}.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by its id, its prefix (e.g. hf_1a2b3c4d) or its full text.
    Revoke {
        /// The key's id, its prefix or its full text.
        #[arg(value_name = "PREFIX_OR_ID")]
        key: String,
    },
}

pub async fn run(db: &Database, command: KeysCommand) -> Result<()> {
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    match command {
        KeysCommand::Create { project } => {
            let created = store::create_api_key(&client, &project).await?;
            println!("project {project} ({})", created.project_id);
            println!("key id  {}", created.key_id);
            println!("prefix  {}", created.prefix);
            eprintln!("Store this key now: it is not shown again.");
            println!("{}", created.key);
        }
        KeysCommand::List { project, json } => {
            let keys = store::list_api_keys(&client, project.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&keys)?);
                return Ok(());
            }
            for key in keys {
                let state = key
                    .revoked_at
                    .map_or_else(|| "active".to_owned(), |at| format!("revoked {at}"));
                println!(
                    "{}  {}  project {}  created {}  {state}",
                    key.prefix, key.key_id, key.project, key.created_at
                );
            }
        }
        KeysCommand::Revoke { key } => {
            let revoked = store::revoke_api_key(&client, &key).await?;
            println!(
                "revoked {} ({}) at {}",
                revoked.prefix, revoked.key_id, revoked.revoked_at
            );
        }
    }
    Ok(())
}
