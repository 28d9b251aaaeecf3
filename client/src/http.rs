//! [`Client`]: the API at a base URL as the holder of one bearer token (an
//! API key, or a machine token for the daemon's routes), one method per
//! route its callers use, and [`Client::get`] / [`Client::post`] for the
//! rest.

use std::time::Duration;

use holdfast_outbound::backoff::Backoff;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use holdfast_wire::api::agents::{AgentList, AgentView, CancelView, StateName};
use holdfast_wire::api::approvals::{
    AnswerRequest, ApprovalList, ApprovalStatusName, ApprovalView, DecisionRequest, QuestionList,
    QuestionStatusName, QuestionView,
};
use holdfast_wire::api::events::EventList;
use holdfast_wire::api::inputs::{InputList, InputRequest, InputView};
use holdfast_wire::api::machines::{
    ClaimedList, HeartbeatRequest, HeartbeatView, MachineCreated, MachineList, OutputRequest,
    OutputView, RegisterMachineRequest, ResultRequest, ResultView, WakeRequest, WakeView,
};
use holdfast_wire::api::replays::{ReplayReport, ReplayRequest};
use holdfast_wire::api::tool_calls::{
    KindName, StatusFilter, ToolCallList, ToolCallView, ToolResultRequest,
};
use holdfast_wire::api::usage::AgentUsage;
use holdfast_wire::domain::WaitingInputs;

/// Tries of a request that may be repeated, when it failed in transit or
/// with 503.
const ATTEMPTS: u32 = 4;
/// The delays between those tries: 200 ms doubling, in the upper half of
/// each ceiling.
const RETRY_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(200),
    cap: Duration::from_secs(5),
};
/// Time for an answer, unless [`Client::with_timeout`] says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for a claim to be answered, beyond the long-poll it asks for.
const CLAIM_MARGIN: Duration = Duration::from_secs(15);

/// Whether a request may be sent again after it failed in transit (or
/// with 503): only when a repeat is harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// With an `Idempotency-Key`, or on routes where the same request again
    /// is accepted or answered with the state it produced (a read, a
    /// decision by the same person, a tool result's 409).
    Transient,
    /// Sent once: a repeat after a lost answer would act twice (create a
    /// second agent, replace a token just handed out).
    Once,
}

/// The API's error answer: `{"error": {"type", "message", "field"?}}`
/// (docs/api.md), or one in that shape for a body that was not the API's
/// (`type` `http_error`, e.g. a proxy's error page).
#[derive(Clone, Debug)]
pub struct ApiFailure {
    pub status: StatusCode,
    /// `error.type`: `invalid_request`, `not_found`, `conflict`, ...
    pub kind: String,
    pub message: String,
    /// `error.field`: the offending field of an `invalid_request`.
    pub field: Option<String>,
    /// The whole body; some errors carry more than `error` (a 409 on a tool
    /// result has the call as it stands in `tool_call`).
    pub body: Value,
}

impl ApiFailure {
    async fn read(response: Response) -> ApiFailure {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str::<Value>(&text)
            .ok()
            .filter(|body| body["error"]["type"].is_string())
            .unwrap_or_else(|| json!({"error": {"type": "http_error", "message": text.trim()}}));
        let error = &body["error"];
        ApiFailure {
            status,
            kind: error["type"].as_str().unwrap_or("http_error").to_owned(),
            message: error["message"].as_str().unwrap_or_default().to_owned(),
            field: error["field"].as_str().map(str::to_owned),
            body,
        }
    }
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )?;
        if let Some(field) = &self.field {
            write!(f, " (field {field})")?;
        }
        Ok(())
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server answered with an error status.
    #[error("{0}")]
    Api(ApiFailure),
    /// The request got no (whole) answer: connection refused or reset, a
    /// timeout.
    #[error("no answer from the server: {0}")]
    Transport(reqwest::Error),
    /// A success status whose body is not the answer the route documents.
    #[error("the server's answer did not parse: {0}")]
    Malformed(String),
}

impl CallError {
    /// The status of an error answer.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            CallError::Api(failure) => Some(failure.status),
            CallError::Transport(_) | CallError::Malformed(_) => None,
        }
    }

    /// The error as the API's error body (the server's own when it sent
    /// one), e.g. for a CLI's `--json` output.
    pub fn json(&self) -> Value {
        match self {
            CallError::Api(failure) => failure.body.clone(),
            CallError::Transport(e) => {
                json!({"error": {"type": "transport", "message": e.to_string()}})
            }
            CallError::Malformed(message) => {
                json!({"error": {"type": "malformed_answer", "message": message}})
            }
        }
    }

    /// Worth another try: the request may not have reached the server, or
    /// the server was briefly unable to serve it.
    fn is_transient(&self) -> bool {
        match self {
            CallError::Transport(e) => !e.is_builder(),
            CallError::Api(failure) => failure.status == StatusCode::SERVICE_UNAVAILABLE,
            CallError::Malformed(_) => false,
        }
    }
}

/// A successful answer: its body, and whether it replays an earlier request
/// (`Idempotent-Replayed: true`).
#[derive(Clone, Debug)]
pub struct Answer<T> {
    pub body: T,
    pub replayed: bool,
}

/// The API at one base URL, as the holder of one bearer token.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    token: String,
    timeout: Duration,
}

impl Client {
    /// A client of its own (10 s to connect, the process's trust store:
    /// [`holdfast_outbound`]), sending `user_agent`.
    pub fn new(base_url: &str, token: &str, user_agent: &str) -> Result<Client, reqwest::Error> {
        let http = holdfast_outbound::client_builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(user_agent)
            .build()?;
        Ok(Client::with_http(http, base_url, token))
    }

    /// A client over an existing `reqwest::Client` (its pool, its proxy
    /// settings).
    pub fn with_http(http: reqwest::Client, base_url: &str, token: &str) -> Client {
        Client {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same API and token, with another time limit per answer (60 s
    /// unless set; a claim's long-poll gets its wait on top).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// A request to `path` (from `/`), with the token and the time limit.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .timeout(self.timeout)
    }

    /// GET `path` (retried: a read is safe to repeat).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.send(Retry::Transient, || self.request(Method::GET, path))
            .await
            .map(|answer| answer.body)
    }

    /// POST `body` as JSON to `path`, with an `Idempotency-Key` if given.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        retry: Retry,
        idempotency_key: Option<&str>,
    ) -> Result<Answer<T>, CallError> {
        self.send(retry, || {
            let request = self.request(Method::POST, path).json(body);
            match idempotency_key {
                Some(key) => request.header("Idempotency-Key", key),
                None => request,
            }
        })
        .await
    }

    /// DELETE `path`, once: a repeat after a lost answer would be a
    /// confusing 404.
    pub async fn delete(&self, path: &str) -> Result<(), CallError> {
        self.send(Retry::Once, || self.request(Method::DELETE, path))
            .await
            .map(|answer: Answer<Value>| drop(answer))
    }

    /// Create an agent from its config (sent once: a repeat would create a
    /// second agent). The config is JSON, as a caller writes it; the API
    /// parses it into its typed form and names a field that does not fit.
    pub async fn create_agent(&self, config: &Value) -> Result<AgentView, CallError> {
        self.post("/v1/agents", config, Retry::Once, None)
            .await
            .map(|answer| answer.body)
    }

    pub async fn agent(&self, agent: Uuid) -> Result<AgentView, CallError> {
        self.get(&format!("/v1/agents/{agent}")).await
    }

    /// Cancel the agent's current turn (sent once: a repeat after the turn
    /// ended answers 409).
    pub async fn cancel_agent(&self, agent: Uuid) -> Result<CancelView, CallError> {
        self.post(
            &format!("/v1/agents/{agent}/cancel"),
            &json!({}),
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// Archive an idle agent (sent once: a repeat answers 409).
    pub async fn archive_agent(&self, agent: Uuid) -> Result<AgentView, CallError> {
        self.post(
            &format!("/v1/agents/{agent}/archive"),
            &json!({}),
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// Start a replay of `agent`'s recorded turns (sent once: a repeat
    /// would start a second replay).
    pub async fn create_replay(
        &self,
        agent: Uuid,
        request: &ReplayRequest,
    ) -> Result<ReplayReport, CallError> {
        self.post(
            &format!("/v1/agents/{agent}/replays"),
            request,
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// A replay's report, as far as it has got.
    pub async fn replay(&self, replay: Uuid) -> Result<ReplayReport, CallError> {
        self.get(&format!("/v1/replays/{replay}")).await
    }

    /// The agent's model usage: its sum and each turn's.
    pub async fn agent_usage(&self, agent: Uuid) -> Result<AgentUsage, CallError> {
        self.get(&format!("/v1/agents/{agent}/usage")).await
    }

    /// One page of the project's agents, oldest first: `limit` agents
    /// created after `after`, in `state` if given.
    pub async fn list_agents(
        &self,
        state: Option<StateName>,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<AgentList, CallError> {
        let mut path = format!("/v1/agents?limit={limit}");
        if let Some(state) = state {
            path.push_str(&format!("&state={}", query_value(&state)));
        }
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        self.get(&path).await
    }

    /// Send an input, retried with its `idempotency_key` (a retried send is
    /// recorded once; the answer says whether it was a replay).
    pub async fn send_input(
        &self,
        agent: Uuid,
        input: &InputRequest,
        idempotency_key: &str,
    ) -> Result<Answer<InputView>, CallError> {
        self.post(
            &format!("/v1/agents/{agent}/inputs"),
            input,
            Retry::Transient,
            Some(idempotency_key),
        )
        .await
    }

    /// An agent's waiting inputs: queued (removable) or pending in the turn.
    pub async fn list_inputs(
        &self,
        agent: Uuid,
        which: WaitingInputs,
    ) -> Result<InputList, CallError> {
        self.get(&format!(
            "/v1/agents/{agent}/inputs?status={}",
            query_value(&which)
        ))
        .await
    }

    /// Take back a queued input (sent once, as [`Client::delete`]): 409 when
    /// a turn has taken it.
    pub async fn remove_input(&self, input: Uuid) -> Result<InputView, CallError> {
        self.send(Retry::Once, || {
            self.request(Method::DELETE, &format!("/v1/inputs/{input}"))
        })
        .await
        .map(|answer| answer.body)
    }

    /// Up to 1000 of an agent's events after seq `after`.
    pub async fn events(&self, agent: Uuid, after: i64) -> Result<EventList, CallError> {
        self.get(&format!(
            "/v1/agents/{agent}/events?after={after}&limit=1000"
        ))
        .await
    }

    pub async fn approvals(
        &self,
        agent: Uuid,
        status: Option<ApprovalStatusName>,
    ) -> Result<ApprovalList, CallError> {
        self.get(&with_status(
            format!("/v1/agents/{agent}/approvals"),
            status.as_ref(),
        ))
        .await
    }

    /// Decide an approval (retried: the same decision by the same person is
    /// accepted again).
    pub async fn decide(
        &self,
        approval: Uuid,
        decision: &DecisionRequest,
    ) -> Result<ApprovalView, CallError> {
        self.post(
            &format!("/v1/approvals/{approval}"),
            decision,
            Retry::Transient,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    pub async fn questions(
        &self,
        agent: Uuid,
        status: Option<QuestionStatusName>,
    ) -> Result<QuestionList, CallError> {
        self.get(&with_status(
            format!("/v1/agents/{agent}/questions"),
            status.as_ref(),
        ))
        .await
    }

    /// Answer a question (retried: the same answer by the same person is
    /// accepted again).
    pub async fn answer_question(
        &self,
        question: Uuid,
        answer: &AnswerRequest,
    ) -> Result<QuestionView, CallError> {
        self.post(
            &format!("/v1/questions/{question}/answer"),
            answer,
            Retry::Transient,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    pub async fn tool_calls(
        &self,
        agent: Uuid,
        status: Option<StatusFilter>,
        kind: Option<KindName>,
    ) -> Result<ToolCallList, CallError> {
        let mut path = with_status(format!("/v1/agents/{agent}/tool-calls"), status.as_ref());
        if let Some(kind) = kind {
            let joint = if path.contains('?') { '&' } else { '?' };
            path.push_str(&format!("{joint}kind={}", query_value(&kind)));
        }
        self.get(&path).await
    }

    /// Post a custom tool call's result. Retried: should an earlier try have
    /// got through, the 409 carries the call as it stands (`tool_call` in
    /// [`ApiFailure::body`]) for the caller to compare with its result.
    pub async fn post_tool_result(
        &self,
        tool_call: Uuid,
        result: &ToolResultRequest,
    ) -> Result<ToolCallView, CallError> {
        self.post(
            &format!("/v1/tool-calls/{tool_call}/result"),
            result,
            Retry::Transient,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// Register a machine (once: the answer carries its only copy of the
    /// token).
    pub async fn register_machine(
        &self,
        machine: &RegisterMachineRequest,
    ) -> Result<MachineCreated, CallError> {
        self.post("/v1/machines", machine, Retry::Once, None)
            .await
            .map(|answer| answer.body)
    }

    /// Give a machine a new token (once: a repeat after a lost answer would
    /// replace the token this answer carried).
    pub async fn rotate_machine_token(&self, machine: Uuid) -> Result<MachineCreated, CallError> {
        self.post(
            &format!("/v1/machines/{machine}/token"),
            &json!({}),
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// The project's machines with their online state.
    pub async fn machines(&self) -> Result<MachineList, CallError> {
        self.get("/v1/machines").await
    }

    /// Start a wake attempt (retried: another start only moves its window).
    pub async fn wake_machine(
        &self,
        machine: Uuid,
        wake: &WakeRequest,
    ) -> Result<WakeView, CallError> {
        self.post(
            &format!("/v1/machines/{machine}/wake"),
            wake,
            Retry::Transient,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    pub async fn delete_machine(&self, machine: Uuid) -> Result<(), CallError> {
        self.delete(&format!("/v1/machines/{machine}")).await
    }

    /// A daemon's heartbeat (machine token). Sent once: the daemon's own
    /// cadence is its retry.
    pub async fn heartbeat(
        &self,
        heartbeat: &HeartbeatRequest,
    ) -> Result<HeartbeatView, CallError> {
        self.post("/v1/machine/heartbeat", heartbeat, Retry::Once, None)
            .await
            .map(|answer| answer.body)
    }

    /// Claim up to `max` commands for the daemon `session`, long-polling up
    /// to `wait` (machine token). Every command returned is accepted.
    pub async fn claim_commands(
        &self,
        session: Uuid,
        wait: Duration,
        max: usize,
    ) -> Result<ClaimedList, CallError> {
        let path = format!(
            "/v1/machine/commands/claim?session={session}&wait={}&max={max}",
            wait.as_secs()
        );
        self.send(Retry::Once, || {
            self.request(Method::POST, &path)
                .timeout(wait + CLAIM_MARGIN)
        })
        .await
        .map(|answer| answer.body)
    }

    /// Report a command's result (machine token; the same result again is
    /// answered `duplicate`).
    pub async fn submit_command_result(
        &self,
        command: Uuid,
        result: &ResultRequest,
    ) -> Result<ResultView, CallError> {
        self.post(
            &format!("/v1/machine/commands/{command}/result"),
            result,
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// Relay a piece of a running command's output (machine token).
    pub async fn command_output(
        &self,
        command: Uuid,
        output: &OutputRequest,
    ) -> Result<OutputView, CallError> {
        self.post(
            &format!("/v1/machine/commands/{command}/output"),
            output,
            Retry::Once,
            None,
        )
        .await
        .map(|answer| answer.body)
    }

    /// Open an agent's event stream after seq `after` (sent as
    /// `Last-Event-ID`); the response is the open `text/event-stream`.
    /// [`crate::follow::follow`] keeps one open across reconnects.
    pub async fn open_stream(&self, agent: Uuid, after: i64) -> Result<Response, CallError> {
        let response = self
            .http
            .get(format!("{}/v1/agents/{agent}/stream", self.base_url))
            .bearer_auth(&self.token)
            .header("Last-Event-ID", after.to_string())
            .header("Accept", "text/event-stream")
            .send()
            .await
            .map_err(CallError::Transport)?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(CallError::Api(ApiFailure::read(response).await))
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        retry: Retry,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Answer<T>, CallError> {
        let attempts = match retry {
            Retry::Transient => ATTEMPTS,
            Retry::Once => 1,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match build().send().await {
                Ok(response) => answer(response).await,
                Err(e) => Err(CallError::Transport(e)),
            };
            match result {
                Err(e) if e.is_transient() && attempt < attempts => {
                    let delay = RETRY_BACKOFF.delay(attempt, None);
                    tracing::warn!("{e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }
}

/// A response as the answer `T`, or the error it is.
async fn answer<T: DeserializeOwned>(response: Response) -> Result<Answer<T>, CallError> {
    let status = response.status();
    if !status.is_success() {
        return Err(CallError::Api(ApiFailure::read(response).await));
    }
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let bytes = response.bytes().await.map_err(CallError::Transport)?;
    // 204 has no body: as JSON, null (a `()` or a `Value` answer).
    let text: &[u8] = if status == StatusCode::NO_CONTENT {
        b"null"
    } else {
        &bytes
    };
    let body =
        serde_json::from_slice(text).map_err(|e| CallError::Malformed(format!("{status}: {e}")))?;
    Ok(Answer { body, replayed })
}

/// `path` with `?status=` for a status filter, as the API spells it.
fn with_status<S: Serialize>(mut path: String, status: Option<&S>) -> String {
    if let Some(status) = status {
        path.push_str(&format!("?status={}", query_value(status)));
    }
    path
}

/// A unit enum's wire name (`StateName::Idle` → `idle`), for a query string.
fn query_value<S: Serialize>(value: &S) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}
