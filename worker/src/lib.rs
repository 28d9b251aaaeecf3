pub mod maintenance;
pub mod webhooks;
