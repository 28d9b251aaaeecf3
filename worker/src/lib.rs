//! Holdfast's long-running processes: the worker (claims agents and runs
//! their steps) and the maintenance loop.

pub mod committer;
pub mod content_urls;
pub mod deltas;
pub mod deps;
pub mod maintenance;
pub mod outcome;
pub mod plan;
pub mod settings;
pub mod spans;
pub mod step;
pub mod stop;
pub mod toolbox;
pub mod tools;
pub mod webhooks;
pub mod worker;

pub use settings::WorkerSettings;
