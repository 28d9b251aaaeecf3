//! The daemon's calls to the Holdfast API (`/v1/machine/...`, with the
//! machine token), made with the shared [`holdfast_client::Client`], and
//! what their failures mean for the daemon.

use std::time::Duration;

use holdfast_client::{ApiFailure, Client};
use holdfast_wire::api::machines::{HeartbeatRequest, OutputRequest, ResultRequest};
use holdfast_wire::domain::{
    ClaimedCommand, CommandResult, CommandResultOutcome, Heartbeat, LiveOutputOutcome,
};
use reqwest::StatusCode;
use uuid::Uuid;

/// Time for a heartbeat or a result to be answered (a claim gets its
/// long-poll on top).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// 401: the token is wrong, was rotated, or its machine was deleted.
    /// Retrying will not help.
    #[error("the API refused the machine token (wrong, rotated, or its machine was deleted); start the daemon again with the machine's current token: {0}")]
    Unauthorized(String),
    /// 409 on a heartbeat or a claim: another daemon process has taken the
    /// machine over.
    #[error("another daemon serves this machine now: {0}")]
    Superseded(String),
    /// 413: the body is larger than the server accepts.
    #[error("the API refused the request as too large")]
    TooLarge,
    /// Any other 4xx: the server will not accept this request as it is.
    #[error("the API refused the request ({status}): {message}")]
    Rejected { status: StatusCode, message: String },
    /// Network errors, timeouts, 5xx: try again later.
    #[error("the API is unavailable: {0}")]
    Unavailable(String),
}

/// The API as the daemon sees it.
#[derive(Clone)]
pub struct ApiClient {
    api: Client,
}

impl ApiClient {
    /// `base` is the API's root URL (`http://host:8080`).
    pub fn new(base: &str, token: &str) -> Result<ApiClient, reqwest::Error> {
        let user_agent = concat!("holdfast-machine/", env!("CARGO_PKG_VERSION"));
        Ok(ApiClient {
            api: Client::new(base, token, user_agent)?.with_timeout(CALL_TIMEOUT),
        })
    }

    /// Send a heartbeat; the answer is the reported commands to stop
    /// (their tool calls were cancelled).
    pub async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<Vec<Uuid>, CallError> {
        self.api
            .heartbeat(&HeartbeatRequest::from(heartbeat))
            .await
            .map(|answer| answer.cancelled_commands)
            .map_err(|e| classify(e, true))
    }

    /// Claim up to `max` commands, long-polling up to `wait`. Every command
    /// returned is accepted: it must be journaled before anything else.
    pub async fn claim(
        &self,
        session: Uuid,
        wait: Duration,
        max: usize,
    ) -> Result<Vec<ClaimedCommand>, CallError> {
        let claimed = self
            .api
            .claim_commands(session, wait, max)
            .await
            .map_err(|e| classify(e, true))?;
        Ok(claimed.commands.into_iter().map(Into::into).collect())
    }

    pub async fn submit_result(
        &self,
        command: Uuid,
        result: &CommandResult,
    ) -> Result<CommandResultOutcome, CallError> {
        let answer = self
            .api
            .submit_command_result(command, &ResultRequest::from(result))
            .await
            .map_err(|e| classify(e, false))?;
        Ok(answer.outcome)
    }

    /// Relay what a running command printed since the last call.
    pub async fn relay_output(
        &self,
        command: Uuid,
        output: &OutputRequest,
    ) -> Result<LiveOutputOutcome, CallError> {
        let answer = self
            .api
            .command_output(command, output)
            .await
            .map_err(|e| classify(e, false))?;
        Ok(answer.outcome)
    }
}

/// What a failed call means for the daemon. `session_bound`: a 409 means
/// another daemon took over (heartbeats, claims).
fn classify(error: holdfast_client::CallError, session_bound: bool) -> CallError {
    let failure: ApiFailure = match error {
        holdfast_client::CallError::Api(failure) => failure,
        other => return CallError::Unavailable(other.to_string()),
    };
    let status = failure.status;
    let message = format!("{}: {}", failure.kind, failure.message);
    match status {
        StatusCode::UNAUTHORIZED => CallError::Unauthorized(message),
        StatusCode::CONFLICT if session_bound => CallError::Superseded(message),
        StatusCode::PAYLOAD_TOO_LARGE => CallError::TooLarge,
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => {
            CallError::Unavailable(message)
        }
        s if s.is_client_error() => CallError::Rejected { status, message },
        _ => CallError::Unavailable(message),
    }
}
