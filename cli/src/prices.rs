//! `holdfast prices set|list|remove`: the operator's model prices, on the
//! database directly (like `holdfast endpoints`). A model step is priced
//! when it commits, at the price then in force: the cost in
//! `GET /v1/agents/{id}/usage` and `holdfast.usage_by_project`.

use anyhow::Result;
use clap::Subcommand;
use holdfast_db::store::{self, NewModelPrice};

use crate::database::Database;

#[derive(Subcommand)]
pub enum PricesCommand {
    /// Set (or replace) a model's prices, in USD per million tokens.
    Set {
        /// The agent config's `model.provider` (anthropic, openai).
        #[arg(long)]
        provider: String,
        /// The agent config's `model.name`.
        #[arg(long)]
        model: String,
        /// Input tokens not read from or written to the cache.
        #[arg(long)]
        input: f64,
        /// Output tokens (reasoning included).
        #[arg(long)]
        output: f64,
        /// Input tokens read from the prompt cache (default: the input price).
        #[arg(long = "cache-read")]
        cache_read: Option<f64>,
        /// Input tokens written to the prompt cache (default: the input price).
        #[arg(long = "cache-write")]
        cache_write: Option<f64>,
    },
    /// List the prices.
    List {
        /// One JSON array of the prices.
        #[arg(long)]
        json: bool,
    },
    /// Remove a model's prices (its later steps are unpriced).
    Remove {
        /// The agent config's `model.provider` (anthropic, openai).
        #[arg(long)]
        provider: String,
        /// The agent config's `model.name`.
        #[arg(long)]
        model: String,
    },
}

pub async fn run(db: &Database, command: PricesCommand) -> Result<()> {
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    match command {
        PricesCommand::Set {
            provider,
            model,
            input,
            output,
            cache_read,
            cache_write,
        } => {
            let price = NewModelPrice {
                provider: &provider,
                model: &model,
                input_usd_per_mtok: input,
                output_usd_per_mtok: output,
                cache_read_usd_per_mtok: cache_read,
                cache_write_usd_per_mtok: cache_write,
            };
            store::set_model_price(&client, &price).await?;
            println!("set the price of {provider} {model}");
        }
        PricesCommand::List { json } => {
            let prices = store::list_model_prices(&client).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&prices)?);
                return Ok(());
            }
            for p in prices {
                let or_input =
                    |price: Option<f64>| price.map_or("=input".to_owned(), |p| p.to_string());
                println!(
                    "{} {}  USD per million tokens: input {}  output {}  cache read {}  cache write {}",
                    p.provider,
                    p.model,
                    p.input_usd_per_mtok,
                    p.output_usd_per_mtok,
                    or_input(p.cache_read_usd_per_mtok),
                    or_input(p.cache_write_usd_per_mtok)
                );
            }
        }
        PricesCommand::Remove { provider, model } => {
            if store::remove_model_price(&client, &provider, &model).await? {
                println!("removed the price of {provider} {model}");
            } else {
                anyhow::bail!("{provider} {model} has no price");
            }
        }
    }
    Ok(())
}
