//! `holdfast demo` as CI runs it: one command in an empty directory, exit
//! 0, a summary that says every tool ran once (the demo computes it from
//! the database and fails otherwise), and no Postgres left running.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use holdfast_tests::process::holdfast_bin;
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
        "tools run    each once: lookup_order ×1, issue_refund ×1",
        "without gaps",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing from:\n{stdout}"
        );
    }
    assert!(!left_running, "the demo left its Postgres running");
}
