//! For the webhook, maintenance and chaos tests: a real HTTP receiver on
//! 127.0.0.1 whose every request is checked by an independent signature
//! verifier (tests/support/verify_webhook.py, Python's standard library),
//! the `holdfast` binary for process tests, and database checks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use holdfast_db::store;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_postgres::Client;
use uuid::Uuid;

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 at once.
    Accept,
    /// This status at once.
    Status(u16),
    /// Keep the request open until [`Receiver::release`], then 200.
    Hold,
    /// This status at once, with this `Retry-After` header value.
    RetryAfter(u16, &'static str),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub webhook_id: String,
    pub content_type: String,
    /// The body, parsed (it was verified as raw bytes).
    pub event: Value,
    /// The independent verifier's verdict.
    pub verified: Result<(), String>,
    /// The W3C `traceparent` header, when the request carried one.
    pub traceparent: Option<String>,
}

struct State {
    secret: Mutex<String>,
    behaviour: Mutex<Behaviour>,
    released: watch::Sender<bool>,
    log: Mutex<Vec<Received>>,
    verifier: tokio::sync::Mutex<Verifier>,
}

/// A webhook receiver on 127.0.0.1 that can go down and come back on the
/// same port, answer with any status, or hold requests open.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<State>,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl Receiver {
    pub async fn start(behaviour: Behaviour) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            secret: Mutex::new(String::new()),
            behaviour: Mutex::new(behaviour),
            released: watch::channel(false).0,
            log: Mutex::new(Vec::new()),
            verifier: tokio::sync::Mutex::new(Verifier::start().await),
        });
        let server = tokio::spawn(serve(listener, state.clone()));
        Receiver {
            addr,
            state,
            server: Mutex::new(Some(server)),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// The endpoint's secret, for verification.
    pub fn set_secret(&self, secret: &str) {
        *self.state.secret.lock().unwrap() = secret.to_owned();
    }

    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *self.state.behaviour.lock().unwrap() = behaviour;
    }

    /// Answer every held request (and all later ones) with 200.
    pub fn release(&self) {
        self.set_behaviour(Behaviour::Accept);
        self.state.released.send_replace(true);
    }

    /// Go down: close the port and every open connection (connections are
    /// then refused).
    pub async fn stop(&self) {
        let server = self.server.lock().unwrap().take();
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
    }

    /// Come back on the same port.
    pub async fn restart(&self) {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if tries < 50 => {
                    tries += 1;
                    eprintln!("rebinding {}: {e}", self.addr);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot rebind {}: {e}", self.addr),
            }
        };
        *self.server.lock().unwrap() = Some(tokio::spawn(serve(listener, self.state.clone())));
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.log.lock().unwrap().len()
    }

    /// Requests per webhook-id.
    pub fn by_id(&self) -> HashMap<String, Vec<Received>> {
        let mut map: HashMap<String, Vec<Received>> = HashMap::new();
        for r in self.received() {
            map.entry(r.webhook_id.clone()).or_default().push(r);
        }
        map
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(server) = self.server.lock().unwrap().take() {
            server.abort();
        }
    }
}

/// Accept connections; each is tracked here, so aborting this task closes
/// them all (a receiver that goes down must not keep answering on old ones).
async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        connections.spawn(answer(stream, state.clone()));
        while connections.try_join_next().is_some() {}
    }
}

/// Read one HTTP/1.1 request, verify it, answer, close.
async fn answer(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = find(&buffer, b"\r\n\r\n") {
            break end;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[header_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let secret = state.secret.lock().unwrap().clone();
    let verified = state
        .verifier
        .lock()
        .await
        .verify(&secret, &headers, &body)
        .await;
    let behaviour = *state.behaviour.lock().unwrap();
    state.log.lock().unwrap().push(Received {
        webhook_id: headers.get("webhook-id").cloned().unwrap_or_default(),
        content_type: headers.get("content-type").cloned().unwrap_or_default(),
        event: serde_json::from_slice(&body).unwrap_or(Value::Null),
        verified: verified.clone(),
        traceparent: headers.get("traceparent").cloned(),
    });
    let mut extra_headers = String::new();
    let status = match (behaviour, verified) {
        (_, Err(_)) => 400,
        (Behaviour::Accept, Ok(())) => 200,
        (Behaviour::Status(code), Ok(())) => code,
        (Behaviour::RetryAfter(code, value), Ok(())) => {
            extra_headers = format!("retry-after: {value}\r\n");
            code
        }
        (Behaviour::Hold, Ok(())) => {
            let mut released = state.released.subscribe();
            let _ = released.wait_for(|r| *r).await;
            200
        }
    };
    let response = format!(
        "HTTP/1.1 {status} Answer\r\n{extra_headers}content-length: 0\r\nconnection: close\r\n\r\n"
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The Python verifier, one long-lived process per receiver.
struct Verifier {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Verifier {
    async fn start() -> Verifier {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/verify_webhook.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs tests/support/verify_webhook.py");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Verifier {
            _child: child,
            stdin,
            stdout,
        }
    }

    async fn verify(
        &mut self,
        secret: &str,
        headers: &HashMap<String, String>,
        body: &[u8],
    ) -> Result<(), String> {
        let request =
            json!({"secret": secret, "headers": headers, "body_b64": STANDARD.encode(body)});
        let mut line = serde_json::to_vec(&request).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).await.unwrap();
        self.stdin.flush().await.unwrap();
        let answer = self
            .stdout
            .next_line()
            .await
            .unwrap()
            .expect("verifier answered");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        if answer["ok"] == json!(true) {
            Ok(())
        } else {
            Err(answer["error"].as_str().unwrap_or("?").to_owned())
        }
    }
}

/// An endpoint of `project` pointing at `receiver`, which learns its secret.
pub async fn hook(client: &Client, project: Uuid, receiver: &Receiver, events: Value) -> Uuid {
    let created =
        store::create_webhook_endpoint(client, project, &receiver.url(), &events, None, true)
            .await
            .unwrap();
    receiver.set_secret(&created.secret);
    created.endpoint.id
}

/// The event of `delivery` as the database has it, keyed by delivery id.
pub struct Expected {
    pub delivery_id: Uuid,
    pub event_id: Uuid,
    pub agent_id: Uuid,
    pub seq: i64,
    pub status: String,
    /// Attempts begun (counted when claimed).
    pub attempts: i32,
    /// An attempt is under way: claimed, its outcome not yet recorded.
    pub in_flight: bool,
}

/// Every delivery of `endpoint`, oldest first.
pub async fn deliveries(client: &Client, endpoint: Uuid) -> Vec<Expected> {
    client
        .query(
            "SELECT id, event_id, agent_id, event_seq, status, attempts, claimed_until IS NOT NULL \
               FROM holdfast.webhook_deliveries WHERE endpoint_id = $1 ORDER BY id",
            &[&endpoint],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Expected {
            delivery_id: r.get(0),
            event_id: r.get(1),
            agent_id: r.get(2),
            seq: r.get(3),
            status: r.get(4),
            attempts: r.get(5),
            in_flight: r.get(6),
        })
        .collect()
}

/// Count `endpoint`'s deliveries in `status`.
pub async fn count_status(client: &Client, endpoint: Uuid, status: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.webhook_deliveries WHERE endpoint_id = $1 AND status = $2",
            &[&endpoint, &status],
        )
        .await
        .unwrap()
        .get(0)
}

/// Check that every delivery of `endpoint` reached `receiver`: every request
/// verified; every delivery's event arrived under the delivery's id as
/// `webhook-id`, body = the event; all copies of one event carry one id.
pub async fn assert_every_event_received(client: &Client, endpoint: Uuid, receiver: &Receiver) {
    let expected = deliveries(client, endpoint).await;
    assert!(!expected.is_empty(), "the test produced deliveries");
    let received = receiver.received();
    for r in &received {
        assert_eq!(
            r.verified,
            Ok(()),
            "independent verifier accepts {}",
            r.webhook_id
        );
        assert_eq!(r.content_type, "application/json");
    }
    let by_event: HashMap<String, Vec<&Received>> =
        received.iter().fold(HashMap::new(), |mut map, r| {
            map.entry(r.event["id"].as_str().unwrap_or_default().to_owned())
                .or_default()
                .push(r);
            map
        });
    for d in &expected {
        let copies = by_event
            .get(&d.event_id.to_string())
            .unwrap_or_else(|| panic!("event {} (seq {}) never arrived", d.event_id, d.seq));
        for copy in copies {
            assert_eq!(
                copy.webhook_id,
                d.delivery_id.to_string(),
                "every copy of one event carries the delivery's webhook-id"
            );
            assert_eq!(copy.event["agent_id"], json!(d.agent_id.to_string()));
            assert_eq!(copy.event["seq"], json!(d.seq));
        }
        assert_eq!(
            d.status, "delivered",
            "delivery {} is delivered",
            d.delivery_id
        );
    }
}

/// The `holdfast` binary of this workspace (built once per test process).
pub fn holdfast_binary() -> PathBuf {
    crate::process::holdfast_bin()
}

/// Start `holdfast server maintenance` on `database_url` with extra environment.
pub fn spawn_maintenance(database_url: &str, env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(holdfast_binary());
    command
        .args(["server", "maintenance"])
        .env("HOLDFAST_DATABASE_URL", database_url)
        .env("HOLDFAST_LOG", "warn")
        // The receivers listen on loopback, which webhooks may not reach
        // unless the operator allows it.
        .env("HOLDFAST_EGRESS_ALLOW", "webhook=127.0.0.0/8")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("spawn holdfast server maintenance")
}
