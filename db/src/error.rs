//! The database layer's error type, and the one place SQLSTATEs become Rust variants.

use tokio_postgres::error::SqlState;

/// Errors from the database layer. SQL functions raise Holdfast's own SQLSTATEs
/// (`HF001`, `HF404`, `HF409`, `HF422`); [`Error::from`] maps them here and
/// nowhere else, so callers branch on variants, not on codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `HF001`: the caller's lease on the agent is gone (expired, reaped,
    /// re-claimed). The step must stop and save nothing.
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// `HF404`: no such agent, tool call, project, ...
    #[error("not found: {0}")]
    NotFound(String),
    /// `HF409`: already decided, or the object is in a state that forbids it.
    #[error("conflict: {0}")]
    Conflict(String),
    /// `HF422`: invalid input; `field` names the offending field when known.
    #[error("invalid {}: {message}", field.as_deref().unwrap_or("input"))]
    Invalid {
        field: Option<String>,
        message: String,
    },
    /// Any other database error (connection lost, serialization failure,
    /// ...). Its text carries what Postgres said ([`describe_postgres_error`]):
    /// tokio-postgres's own Display of a server error is only `db error`.
    #[error("database: {}", describe_postgres_error(.0))]
    Database(#[source] tokio_postgres::Error),
    /// A connection could not be opened. `cause` says why in one line (TLS
    /// required by the server, certificate not trusted, authentication
    /// failed, host unreachable, database does not exist); `error` is
    /// tokio-postgres's own, kept for [`Error::is_retryable`] and logs.
    #[error("cannot connect to Postgres at {target}: {cause}")]
    Connect {
        target: String,
        cause: String,
        error: tokio_postgres::Error,
    },
    #[error("connection pool: {0}")]
    Pool(String),
    #[error("migration: {0}")]
    Migration(String),
    #[error("embedded postgres: {0}")]
    EmbeddedPostgres(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when the same call may succeed if tried again later: the
    /// connection dropped, the server restarted, a serialization conflict.
    /// Lease loss and input errors are never retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Database(e) | Error::Connect { error: e, .. } => match e.code() {
                None => true, // IO / closed connection
                Some(code) => {
                    *code == SqlState::T_R_SERIALIZATION_FAILURE
                        || *code == SqlState::T_R_DEADLOCK_DETECTED
                        || *code == SqlState::ADMIN_SHUTDOWN
                        || *code == SqlState::CRASH_SHUTDOWN
                        || *code == SqlState::CANNOT_CONNECT_NOW
                        || code.code().starts_with("08")
                }
            },
            Error::Pool(_) => true,
            _ => false,
        }
    }

    /// True when Postgres refused a write for want of disk space (SQLSTATE
    /// 53100, `disk_full`): no fault of the request or the step, and the
    /// same write succeeds once space is freed. Not [`Error::is_retryable`]:
    /// the connection is fine, and only an operator can end it.
    pub fn is_storage_full(&self) -> bool {
        matches!(self, Error::Database(e) if e.code() == Some(&SqlState::DISK_FULL))
    }

    /// The field an [`Error::Invalid`] names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::Invalid { field, .. } => field.as_deref(),
            _ => None,
        }
    }
}

/// What a tokio-postgres error says, in one line: for an error the server
/// sent, its severity, SQLSTATE, message, and detail, hint, where and
/// position when it has them; otherwise the client's text with each of its
/// causes (`error communicating with the server: Connection reset by peer`).
/// tokio-postgres's Display of a server error is only `db error`, which told
/// nothing in a log line behind a pooler.
pub fn describe_postgres_error(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
        for (label, value) in [
            ("detail", db.detail()),
            ("hint", db.hint()),
            ("where", db.where_()),
        ] {
            if let Some(value) = value {
                text.push_str(&format!("; {label}: {value}"));
            }
        }
        return text;
    }
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        text.push_str(&format!(": {e}"));
        cause = e.source();
    }
    text
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(db) = e.as_db_error() else {
            return Error::Database(e);
        };
        let message = db.message().to_owned();
        match db.code().code() {
            "HF001" => Error::LeaseLost(message),
            "HF404" => Error::NotFound(message),
            "HF409" => Error::Conflict(message),
            "HF422" => Error::Invalid {
                field: db.column().map(str::to_owned),
                message,
            },
            _ => Error::Database(e),
        }
    }
}

impl From<holdfast_wire::config::InvalidConfig> for Error {
    fn from(e: holdfast_wire::config::InvalidConfig) -> Self {
        Error::Invalid {
            field: Some(e.field),
            message: e.message,
        }
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Error::from(e),
            other => Error::Pool(other.to_string()),
        }
    }
}
