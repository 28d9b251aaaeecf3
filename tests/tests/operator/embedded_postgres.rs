//! The embedded Postgres trusts whoever reaches its socket, so the socket's
//! directory is its lock: private to the user the server runs as, and never
//! a directory (or symlink) someone else planted at its predictable name.
//! A cluster asked for in a directory its user cannot enter starts anyway
//! (its files where that user can reach them); a server that a killed
//! process left running is taken over and stopped, one a live process
//! started is left alone.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use holdfast_db::cluster::{ClusterOptions, LocalCluster};
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

fn fast() -> ClusterOptions {
    ClusterOptions {
        fast_unsafe_fsync_off: true,
        max_connections: 20,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_in_a_directory_its_user_cannot_enter_starts_with_its_files_where_it_can() {
    let scratch = ScratchDir::new("private-home");
    // Like /root: a 0700 directory of this process's user.
    let home = scratch.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let place = home.join(".holdfast/pg");
    let start = {
        let place = place.clone();
        move || LocalCluster::start(&place, &fast())
    };
    let cluster = tokio::task::spawn_blocking(start.clone())
        .await
        .unwrap()
        .expect("a cluster in a 0700 directory starts");
    assert!(cluster.is_running());
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    // As root the server runs as another user, who cannot enter `home`:
    // the files live elsewhere, reached through a symlink at their place.
    let linked = std::fs::symlink_metadata(&place)
        .unwrap()
        .file_type()
        .is_symlink();
    assert_eq!(linked, root, "{}", cluster.base_dir().display());
    if root {
        assert!(cluster.base_dir().starts_with("/var/lib/holdfast"));
        assert_ne!(server_uid(&cluster), 0);
    }
    let elsewhere = cluster.base_dir().to_path_buf();
    drop(cluster);
    // The next start finds the same cluster through its place.
    let again = tokio::task::spawn_blocking(start).await.unwrap().unwrap();
    assert_eq!(again.base_dir(), elsewhere);
    assert!(again.data_dir().join("PG_VERSION").exists());
    drop(again);
    if root {
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_left_by_a_gone_process_is_taken_over_and_one_a_live_process_started_is_not() {
    let base = ScratchDir::new("taken-over");
    let open = {
        let base = base.to_path_buf();
        move || LocalCluster::start_taking_over(&base, &fast())
    };
    let mut first = tokio::task::spawn_blocking(open.clone())
        .await
        .unwrap()
        .unwrap();
    assert!(first.stops_on_drop());
    assert_eq!(first.owner(), Some(std::process::id()));

    // Its owner (this process) lives: a second user leaves it running.
    let second = tokio::task::spawn_blocking(open.clone())
        .await
        .unwrap()
        .unwrap();
    assert!(!second.stops_on_drop());
    drop(second);
    assert!(first.is_running());

    // Its owner is gone (a killed `up`): the next one takes it over.
    first.detach();
    let data_dir = first.data_dir();
    drop(first);
    std::fs::write(base.join("owner"), "4194303 1\n").unwrap();
    let third = tokio::task::spawn_blocking(open).await.unwrap().unwrap();
    assert!(third.stops_on_drop(), "a stale server is taken over");
    assert_eq!(third.owner(), Some(std::process::id()));
    drop(third);
    assert!(
        !data_dir.join("postmaster.pid").exists(),
        "the server a gone process left running is stopped"
    );
}
