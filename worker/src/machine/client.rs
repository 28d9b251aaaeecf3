//! The daemon's HTTP calls to the Holdfast API (`/v1/machine/...`, with the
//! machine token), and what their failures mean for the daemon.

use std::time::Duration;

use holdfast_engine::domain::{ClaimedCommand, CommandResult, CommandResultOutcome, Heartbeat};
use reqwest::StatusCode;
use serde::Deserialize;
use uuid::Uuid;

/// Time for a heartbeat or a result to be answered.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Time for a claim to be answered, beyond the long-poll it asks for.
const CLAIM_MARGIN: Duration = Duration::from_secs(15);

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
    http: reqwest::Client,
    base: String,
    token: String,
}

#[derive(Deserialize)]
struct ClaimAnswer {
    commands: Vec<ClaimedCommand>,
}

#[derive(Deserialize)]
struct ResultAnswer {
    outcome: CommandResultOutcome,
}

impl ApiClient {
    /// `base` is the API's root URL (`http://host:8080`).
    pub fn new(base: &str, token: &str) -> Result<ApiClient, reqwest::Error> {
        Ok(ApiClient {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()?,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    pub async fn heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), CallError> {
        let response = self
            .http
            .post(format!("{}/v1/machine/heartbeat", self.base))
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT)
            .json(heartbeat)
            .send()
            .await;
        check(response, true).await.map(drop)
    }

    /// Claim up to `max` commands, long-polling up to `wait`. Every command
    /// returned is accepted: it must be journaled before anything else.
    pub async fn claim(
        &self,
        session: Uuid,
        wait: Duration,
        max: usize,
    ) -> Result<Vec<ClaimedCommand>, CallError> {
        let response = self
            .http
            .post(format!("{}/v1/machine/commands/claim", self.base))
            .query(&[
                ("session", session.to_string()),
                ("wait", wait.as_secs().to_string()),
                ("max", max.to_string()),
            ])
            .bearer_auth(&self.token)
            .timeout(wait + CLAIM_MARGIN)
            .send()
            .await;
        let response = check(response, true).await?;
        let answer: ClaimAnswer = response
            .json()
            .await
            .map_err(|e| CallError::Unavailable(format!("reading a claim's answer: {e}")))?;
        Ok(answer.commands)
    }

    pub async fn submit_result(
        &self,
        command: Uuid,
        result: &CommandResult,
    ) -> Result<CommandResultOutcome, CallError> {
        let response = self
            .http
            .post(format!(
                "{}/v1/machine/commands/{command}/result",
                self.base
            ))
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT)
            .json(result)
            .send()
            .await;
        let response = check(response, false).await?;
        let answer: ResultAnswer = response
            .json()
            .await
            .map_err(|e| CallError::Unavailable(format!("reading a result's answer: {e}")))?;
        Ok(answer.outcome)
    }
}

/// Sort a response into success or a [`CallError`]. `session_bound`: a 409
/// means another daemon took over (heartbeats, claims).
async fn check(
    response: Result<reqwest::Response, reqwest::Error>,
    session_bound: bool,
) -> Result<reqwest::Response, CallError> {
    let response = response.map_err(|e| CallError::Unavailable(e.to_string()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let message = response.text().await.unwrap_or_default();
    Err(match status {
        StatusCode::UNAUTHORIZED => CallError::Unauthorized(message),
        StatusCode::CONFLICT if session_bound => CallError::Superseded(message),
        StatusCode::PAYLOAD_TOO_LARGE => CallError::TooLarge,
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => {
            CallError::Unavailable(format!("{status}: {message}"))
        }
        s if s.is_client_error() => CallError::Rejected { status, message },
        _ => CallError::Unavailable(format!("{status}: {message}")),
    })
}
