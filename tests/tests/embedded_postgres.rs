//! The embedded Postgres trusts whoever reaches its socket, so the socket's
//! directory is its lock: private to the user the server runs as, and never
//! a directory (or symlink) someone else planted at its predictable name.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use holdfast_engine::cluster::{ClusterOptions, LocalCluster};
use holdfast_tests::{PrivateCluster, ScratchDir};

/// The uid the server process runs as (postmaster.pid's first line).
fn server_uid(cluster: &LocalCluster) -> u32 {
    let pid_file = std::fs::read_to_string(cluster.data_dir().join("postmaster.pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim();
    std::fs::metadata(format!("/proc/{pid}")).unwrap().uid()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_directory_is_private_to_the_user_postgres_runs_as() {
    let private = PrivateCluster::start().await;
    let dir = private.cluster.socket_dir();
    let found = std::fs::symlink_metadata(dir).unwrap();
    assert!(found.file_type().is_dir(), "{}", dir.display());
    assert_eq!(
        found.permissions().mode() & 0o777,
        0o700,
        "{} is private",
        dir.display()
    );
    assert_eq!(found.uid(), server_uid(&private.cluster));
    // And this process (root or not) still connects through it.
    let (client, connection) = private.config().connect().await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("SELECT 1").await.unwrap();
    assert!(private
        .cluster
        .psql_command("postgres")
        .starts_with(&format!("psql -h {} -p ", dir.display())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_planted_at_the_socket_directory_is_refused() {
    let base = ScratchDir::new("planted-socket");
    let options = ClusterOptions {
        fast_unsafe_fsync_off: true,
        max_connections: 20,
    };
    let start = {
        let (base, options) = (base.to_path_buf(), options.clone());
        move || LocalCluster::start(&base, &options)
    };
    let cluster = tokio::task::spawn_blocking(start.clone())
        .await
        .unwrap()
        .unwrap();
    let socket_dir = cluster.socket_dir().to_path_buf();
    drop(cluster); // stops the server
    std::fs::remove_dir_all(&socket_dir).unwrap();
    // Someone points the predictable name at a directory of theirs.
    let target = ScratchDir::new("planted-target");
    std::fs::set_permissions(&*target, std::fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink(&*target, &socket_dir).unwrap();

    let refused = tokio::task::spawn_blocking(start).await.unwrap();
    let _ = std::fs::remove_file(&socket_dir);
    let error = refused.expect_err("a cluster on a planted socket directory");
    assert!(error.to_string().contains("is not a directory"), "{error}");
    let target_now = std::fs::metadata(&*target).unwrap();
    assert_eq!(target_now.permissions().mode() & 0o777, 0o751, "untouched");
    assert_eq!(
        target_now.uid(),
        std::fs::metadata("/proc/self").unwrap().uid()
    );
}
