//! Domain types shared by the worker, the API and the CLI, by entity (the
//! same areas as [`crate::store`]); each type is re-exported here by name, so
//! callers write `domain::Agent` and the lists below say which module holds it.
//!
//! An enum that is stored or sent as text converts one way: strum derives
//! its SQL string (`IntoStaticStr` for `<&str>::from(state)`, `Display`,
//! `EnumString` for `parse`), snake_case like its serde name and the
//! strings of the column's CHECK (tested in `tests/tests/domain_strings.rs`).

mod agents;
mod approvals;
mod endpoints;
mod events;
mod keys;
mod machines;
mod schedules;
mod status;
mod steps;
mod tool_calls;
mod usage;
mod webhooks;

pub use agents::{
    Agent, AgentState, CancelOutcome, ForkPoint, Input, InputCreated, InputMode, InputStatus,
    LastTurn, PostedInput, TurnError, TurnOutcome, WaitingInputs,
};
pub use approvals::{Approval, ApprovalStatus, ApprovalSubject, Question, QuestionStatus};
pub use endpoints::{
    ModelDestination, ModelEndpoint, ModelRoute, NewModelEndpoint, ProviderKeyStatus, SealedKey,
};
pub use events::{Event, RetentionReport};
pub use keys::{ApiKeyCreated, ApiKeyListed, ApiKeyOwner, ApiKeyRevoked};
pub use machines::{
    ClaimedCommand, CommandLimit, CommandResult, CommandResultOutcome, CommandResultState,
    DaemonCommandState, Heartbeat, HeartbeatRecorded, LiveOutputOutcome, MachineIdentity,
    MachineRegistered, MachineStatus, MachineTickReport, MachineWake, ReportedCommand,
    LIVE_OUTPUT_MAX_BYTES, LIVE_OUTPUT_MIN_INTERVAL, LIVE_OUTPUT_PIECE_MAX_BYTES,
};
pub use schedules::{ConfigVersion, DueSchedule, NewSchedule, Schedule};
pub use status::{StuckAgent, WorkerLeases};
pub use steps::{
    AttachmentQuotas, AttemptTrace, Claim, HistoryMessage, LimitMaxima, LostAttempt,
    MaintenanceReport, ModelInput, ModelStep, PendingInput, Renewal, StepContext, ToolCallRecord,
};
pub use tool_calls::{NewToolCall, ToolCall, ToolCallStatus, ToolKind};
pub use usage::{AgentUsage, DayUsage, ModelPrice, ProjectUsage, TokenUsage, TurnUsage, Usage};
pub use webhooks::{
    ClaimedWebhookDelivery, CreatedWebhookEndpoint, RecordedAttempt, WebhookDelivery,
    WebhookDeliveryFilter, WebhookDeliveryStatus, WebhookEndpoint, WebhookQueueStats,
};

#[cfg(test)]
mod tests {
    use std::fmt::{Debug, Display};
    use std::str::FromStr;

    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::Value;
    use strum::VariantArray;

    use super::*;
    use crate::config::Provider;

    /// Each variant's string parses back to it and is its `Display` text.
    fn text_round_trips<T>()
    where
        T: VariantArray + Copy + PartialEq + Debug + Display + FromStr + Into<&'static str>,
        <T as FromStr>::Err: Debug,
    {
        for &variant in T::VARIANTS {
            let text: &'static str = variant.into();
            assert_eq!(text.parse::<T>().unwrap(), variant);
            assert_eq!(variant.to_string(), text);
        }
        assert!("no_such_variant".parse::<T>().is_err());
    }

    /// The string is also the variant's serde name, both ways.
    fn text_is_the_serde_name<T>()
    where
        T: VariantArray
            + Copy
            + PartialEq
            + Debug
            + Into<&'static str>
            + Serialize
            + DeserializeOwned,
    {
        for &variant in T::VARIANTS {
            let text: &'static str = variant.into();
            assert_eq!(serde_json::to_value(variant).unwrap(), Value::from(text));
            assert_eq!(
                serde_json::from_value::<T>(Value::from(text)).unwrap(),
                variant
            );
        }
    }

    fn text_round_trips_and_is_the_serde_name<T>()
    where
        T: VariantArray
            + Copy
            + PartialEq
            + Debug
            + Display
            + FromStr
            + Into<&'static str>
            + Serialize
            + DeserializeOwned,
        <T as FromStr>::Err: Debug,
    {
        text_round_trips::<T>();
        text_is_the_serde_name::<T>();
    }

    #[test]
    fn every_text_enum_round_trips_and_matches_its_serde_name() {
        text_round_trips_and_is_the_serde_name::<AgentState>();
        text_round_trips_and_is_the_serde_name::<CancelOutcome>();
        text_round_trips_and_is_the_serde_name::<ToolKind>();
        text_round_trips_and_is_the_serde_name::<ToolCallStatus>();
        text_round_trips_and_is_the_serde_name::<ApprovalStatus>();
        text_round_trips_and_is_the_serde_name::<QuestionStatus>();
        text_round_trips_and_is_the_serde_name::<WebhookDeliveryStatus>();
        text_round_trips_and_is_the_serde_name::<DaemonCommandState>();
        text_round_trips_and_is_the_serde_name::<CommandResultState>();
        text_round_trips_and_is_the_serde_name::<CommandResultOutcome>();
        text_round_trips_and_is_the_serde_name::<LiveOutputOutcome>();
        text_round_trips_and_is_the_serde_name::<Provider>();
        // SQL's outcome of record_webhook_attempt only (no serde form).
        text_round_trips::<RecordedAttempt>();
    }

    #[test]
    fn multi_word_variants_are_snake_case() {
        assert_eq!(
            <&str>::from(ToolCallStatus::AwaitingApproval),
            "awaiting_approval"
        );
        assert_eq!(<&str>::from(RecordedAttempt::RetryScheduled), "pending");
    }
}
