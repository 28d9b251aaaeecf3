//! A TCP proxy in front of a cluster's Unix socket, or of a TCP server (the
//! API, for a machine daemon), that can stop forwarding without closing
//! anything, as a network partition that drops packets does: both ends keep
//! their sockets and hear nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use holdfast_db::cluster::LocalCluster;
use holdfast_db::connect::ConnectConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

/// What the proxy forwards to.
#[derive(Clone)]
enum Target {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

pub struct PartitionProxy {
    port: u16,
    cut: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl PartitionProxy {
    /// Forward 127.0.0.1:(a free port) to `cluster`'s socket.
    pub async fn start(cluster: &LocalCluster) -> PartitionProxy {
        PartitionProxy::start_to(Target::Unix(cluster.socket_dir().join(".s.PGSQL.5432"))).await
    }

    /// Forward 127.0.0.1:(a free port) to the TCP server at `server`.
    pub async fn start_tcp(server: SocketAddr) -> PartitionProxy {
        PartitionProxy::start_to(Target::Tcp(server)).await
    }

    async fn start_to(target: Target) -> PartitionProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let task = tokio::spawn(accept(listener, target, cut.clone()));
        PartitionProxy { port, cut, task }
    }

    /// The base URL of an HTTP server behind the proxy.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A config for `dbname` through the proxy.
    pub fn config(&self, dbname: &str) -> ConnectConfig {
        crate::loopback_config(self.port, dbname)
    }

    /// Stop forwarding (bytes stay where they are; nothing is closed).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forward again, what was held first.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for PartitionProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, target: Target, cut: Arc<watch::Sender<bool>>) {
    while let Ok((client, _)) = listener.accept().await {
        let (client_read, client_write) = client.into_split();
        match &target {
            Target::Unix(socket) => {
                let Ok(server) = UnixStream::connect(socket).await else {
                    continue;
                };
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write, cut.subscribe()));
                tokio::spawn(forward(server_read, client_write, cut.subscribe()));
            }
            Target::Tcp(addr) => {
                let Ok(server) = TcpStream::connect(addr).await else {
                    continue;
                };
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write, cut.subscribe()));
                tokio::spawn(forward(server_read, client_write, cut.subscribe()));
            }
        }
    }
}

/// Copy `from` to `to`, holding still while the link is cut: no read (so
/// the sender's buffers fill as on a dead path), no write, no close.
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut cut: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if cut.wait_for(|cut| !cut).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = cut.wait_for(|cut| *cut) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if cut.wait_for(|cut| !cut).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
