//! `holdfast projects allow-custom-urls|deny-custom-urls NAME`: whether a
//! project's agents may set their own `model.base_url`. Requests to such a
//! URL carry the project's own provider key if it set one, and never an
//! operator credential.

use anyhow::Result;
use clap::Subcommand;
use holdfast_engine::store;

use crate::database::Database;

#[derive(Subcommand)]
pub enum ProjectsCommand {
    /// Let the project's agents set `model.base_url`.
    AllowCustomUrls { project: String },
    /// Refuse `model.base_url` again (agents with one fail their next model call).
    DenyCustomUrls { project: String },
}

pub async fn run(db: &Database, command: ProjectsCommand) -> Result<()> {
    db.migrate().await?;
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    let (project, allowed) = match command {
        ProjectsCommand::AllowCustomUrls { project } => (project, true),
        ProjectsCommand::DenyCustomUrls { project } => (project, false),
    };
    store::set_project_custom_model_urls(&client, &project, allowed).await?;
    let verb = if allowed { "may" } else { "may not" };
    println!("agents of project {project} {verb} set model.base_url");
    Ok(())
}
