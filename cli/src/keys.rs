//! `holdfast keys create|revoke`: API keys, stored hashed. A new key is
//! printed once, alone on the last line of stdout, so scripts can capture
//! it with `tail -n1`.

use anyhow::Result;
use clap::Subcommand;
use holdfast_engine::store;

use crate::database::Database;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create a key for a project (the project is created if needed).
    Create {
        /// The project's name: letters, digits, ".", "_" or "-".
        #[arg(long)]
        project: String,
    },
    /// Revoke a key by its id, its prefix (e.g. hf_1a2b3c4d) or its full text.
    Revoke {
        #[arg(value_name = "PREFIX_OR_ID")]
        key: String,
    },
}

pub async fn run(db: &Database, command: KeysCommand) -> Result<()> {
    db.migrate().await?;
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
