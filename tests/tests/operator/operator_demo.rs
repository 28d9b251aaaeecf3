//! `holdfast demo` as CI runs it: one command in an empty directory, exit
//! 0, a summary that says every tool ran once (the demo computes it from
//! the database and fails otherwise), the command on this machine run
//! once (its ledger file has one line), and no Postgres, worker or machine
//! daemon left running.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use holdfast_tests::process::{holdfast_bin, processes_working_in};
use tokio::process::Command;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_exits_0_with_a_crash_a_recovery_and_each_tool_once() {
    // Under /tmp: Postgres runs as an unprivileged user when tests run as root.
    let home = PathBuf::from(format!("/tmp/holdfast-demo-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&home).unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        Command::new(holdfast_bin())
            .arg("demo")
            .current_dir(&home)
            // No key and no provider URL: the demo needs neither.
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("HOLDFAST_DATABASE_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo finishes")
    .expect("run holdfast demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let left_running = home.join(".holdfast/demo/data/postmaster.pid").exists();
    let left_behind = processes_working_in(&home);
    // The demo's command appends one line to this ledger each time it runs.
    let ledger = std::fs::read_to_string(home.join(".holdfast/demo/machine/work/refunds.log"))
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&home);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for expected in [
        "SIGKILL demo-worker-",
        "recovered",
        "approved by demo-operator",
        "accepted the command and runs it",
        "stdout      │ refund logged on ",
        "tools run    each once: lookup_order ×1, issue_refund ×1, run_command ×1",
        "without gaps",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing from:\n{stdout}"
        );
    }
    assert!(!left_running, "the demo left its Postgres running");
    assert_eq!(left_behind, Vec::<String>::new(), "processes left running");
    assert_eq!(
        ledger.lines().collect::<Vec<_>>(),
        ["R-7731 order=1001 amount=49.00EUR"],
        "the command ran once"
    );
}
