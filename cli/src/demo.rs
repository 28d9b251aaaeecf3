//! `holdfast demo`: one command, no API key, no network. It starts a whole
//! stack on this machine — a private Postgres (`.holdfast/demo`, fsync off),
//! a scripted model server speaking the Anthropic protocol on 127.0.0.1,
//! the HTTP API and maintenance in this process, two `holdfast server worker`
//! child processes and a `holdfast machine run` daemon for this host — and
//! plays one support conversation through the real HTTP API: the agent
//! streams text, calls a custom tool the demo answers, asks for an approval
//! the demo grants, runs a command on this machine, and in the middle of
//! its last answer the worker running it is SIGKILLed; the other worker
//! picks the agent up from its last saved step. The summary's counts come
//! from the database, and the demo fails (exit 1) if any tool ran other
//! than once.
//!
//! By concern: [`stack`] starts and stops the processes, [`script`] is what
//! the model says and what the custom tools do, [`story`] plays the
//! conversation over the HTTP API, [`timeline`] prints it as it happens, and
//! [`verdict`] reads the database's audit views (`holdfast.agent_audit`,
//! `holdfast.tool_call_audit`) for the summary and the exit status.

mod script;
mod stack;
mod story;
mod timeline;
mod verdict;

use std::path::PathBuf;

use anyhow::Result;

use stack::Stack;
use timeline::Timeline;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The demo's private Postgres cluster (kept between runs; the demo's
    /// database in it is created afresh each time).
    #[arg(long, default_value = ".holdfast/demo")]
    dir: PathBuf,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let mut out = Timeline::start();
    println!(
        "Holdfast demo: one agent, two worker processes, a machine daemon and a scripted model, all on this machine."
    );
    println!();
    let mut stack = Stack::start(&args.dir, &mut out).await?;
    let played = stack.play(&mut out).await;
    let stopped = stack.stop(&mut out).await;
    let summary = played?;
    stopped?;
    summary.print();
    summary.verdict()
}
