//! A Postgres cluster whose whole data directory (its WAL included) lives
//! on a small tmpfs of its own, which a test fills and frees: a full disk
//! as a managed Postgres meets it. Mounting needs root (CAP_SYS_ADMIN);
//! CI runs as root, and anywhere else the test fails saying so.

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
}

impl SmallDiskCluster {
    /// A migrated cluster on a tmpfs of `size_mib` MiB.
    pub async fn start(size_mib: u32) -> SmallDiskCluster {
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
                "cannot mount a {size_mib} MiB tmpfs for Postgres' data and WAL at {}: {}\
                 the disk-full tests need root (CAP_SYS_ADMIN) to mount it; run them as root, \
                 as CI does",
                mount.display(),
                String::from_utf8_lossy(&mounted.stderr)
            );
        }
        let base = mount.join("cluster");
        let cluster = tokio::task::spawn_blocking(move || {
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
        .expect("start a cluster on the small disk");
        let disk = SmallDiskCluster { cluster, mount };
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
    }
}
