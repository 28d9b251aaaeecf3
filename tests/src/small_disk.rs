//! A Postgres cluster whose whole data directory (its WAL included), or
//! only its WAL, lives on a small tmpfs of its own, which a test fills and
//! frees: a full disk as a managed Postgres meets it. Mounting needs root
//! (CAP_SYS_ADMIN); CI runs as root, and anywhere else the test fails
//! saying so.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use holdfast_db::cluster::{ClusterOptions, LocalCluster};
use holdfast_db::connect::ConnectConfig;
use holdfast_db::migrate;
use uuid::Uuid;

pub struct SmallDiskCluster {
    pub cluster: LocalCluster,
    mount: PathBuf,
    /// The cluster's own directory, on the ordinary disk, when only its WAL
    /// is on the small one.
    base_elsewhere: Option<PathBuf>,
}

/// Mount a tmpfs of `size_mib` MiB at a new directory under /tmp.
fn mount_small_disk(size_mib: u32) -> PathBuf {
    let mount = PathBuf::from(format!(
        "/tmp/holdfast-small-disk-{}",
        Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&mount).expect("create the mount point");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m,mode=0755")])
        .arg("tmpfs")
        .arg(&mount)
        .output()
        .expect("run mount");
    if !mounted.status.success() {
        let _ = std::fs::remove_dir(&mount);
        panic!(
            "cannot mount a {size_mib} MiB tmpfs for Postgres at {}: {}\
             the disk-full tests need root (CAP_SYS_ADMIN) to mount it; run them as root, \
             as CI does",
            mount.display(),
            String::from_utf8_lossy(&mounted.stderr)
        );
    }
    mount
}

async fn start_cluster(base: PathBuf) -> LocalCluster {
    tokio::task::spawn_blocking(move || {
        LocalCluster::start(
            &base,
            &ClusterOptions {
                fast_unsafe_fsync_off: true,
                max_connections: 100,
            },
        )
    })
    .await
    .unwrap()
    .expect("start a cluster for the small disk")
}

impl SmallDiskCluster {
    /// A migrated cluster on a tmpfs of `size_mib` MiB.
    pub async fn start(size_mib: u32) -> SmallDiskCluster {
        let mount = mount_small_disk(size_mib);
        let cluster = start_cluster(mount.join("cluster")).await;
        let disk = SmallDiskCluster {
            cluster,
            mount,
            base_elsewhere: None,
        };
        let (mut client, connection) = disk.config().connect().await.unwrap();
        tokio::spawn(connection);
        migrate::migrate(&mut client)
            .await
            .expect("migrate the cluster on the small disk");
        // The checkpoint recycles the WAL segments the migration filled
        // into the segments that come next, already allocated: while the
        // disk is full, WAL goes on being written into them, and what runs
        // out is room for table and index pages (SQLSTATE 53100), as on a
        // managed Postgres whose WAL keeps its recycled segments.
        client.batch_execute("CHECKPOINT").await.unwrap();
        disk
    }

    /// A migrated cluster whose WAL alone is on a tmpfs of `size_mib` MiB
    /// (`pg_wal` a link to it, as `initdb --waldir` makes it), its data
    /// directory on the ordinary disk. An inactive replication slot that
    /// reserves WAL, as an abandoned standby's does on a managed Postgres,
    /// keeps every segment from now on: writes fill the small disk instead
    /// of recycling old segments.
    pub async fn start_with_only_wal_on_it(size_mib: u32) -> SmallDiskCluster {
        let mount = mount_small_disk(size_mib);
        let base = PathBuf::from(format!(
            "/tmp/holdfast-wal-elsewhere-{}",
            Uuid::new_v4().simple()
        ));
        let cluster = start_cluster(base.clone()).await;
        let disk = SmallDiskCluster {
            cluster,
            mount,
            base_elsewhere: Some(base),
        };
        let (mut client, connection) = disk.config().connect().await.unwrap();
        let connection = tokio::spawn(connection);
        migrate::migrate(&mut client)
            .await
            .expect("migrate the cluster whose WAL goes on the small disk");
        drop(client);
        let _ = connection.await;
        disk.cluster
            .stop()
            .expect("stop the cluster to move its WAL");
        let pg_wal = disk.cluster.data_dir().join("pg_wal");
        let moved = disk.mount.join("pg_wal");
        let status = Command::new("mv")
            .arg(&pg_wal)
            .arg(&moved)
            .status()
            .expect("run mv");
        assert!(status.success(), "move pg_wal to the small disk");
        std::os::unix::fs::symlink(&moved, &pg_wal).expect("link pg_wal to the small disk");
        disk.cluster.restart().expect("start the cluster again");
        let (client, connection) = disk.config().connect().await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute("SELECT pg_create_physical_replication_slot('abandoned_standby', true)")
            .await
            .unwrap();
        disk
    }

    pub fn config(&self) -> ConnectConfig {
        ConnectConfig::parse(&self.cluster.connection_string("postgres")).unwrap()
    }

    fn filler(&self) -> PathBuf {
        self.mount.join("filler")
    }

    /// Take every free byte of the filesystem (a file of zeros written until
    /// `ENOSPC`; tmpfs allocates each page written).
    pub fn fill(&self) {
        let mut file = std::fs::File::create(self.filler()).expect("create the filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("fill the small disk: {e}"),
            }
        }
        // Whatever part of a page is left, take it too.
        while let Ok(n) = file.write(&chunk[..512]) {
            if n == 0 {
                break;
            }
        }
    }

    /// Give the space back.
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).expect("remove the filler");
    }
}

impl Drop for SmallDiskCluster {
    fn drop(&mut self) {
        // Killed, not stopped: a shutdown checkpoint on a full disk can
        // hang; nothing here is kept.
        let _ = self.cluster.kill();
        let unmounted = Command::new("umount").arg(&self.mount).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // A postgres child not yet gone still has files open there.
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
        let _ = std::fs::remove_dir(&self.mount);
        if let Some(base) = &self.base_elsewhere {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}
