//! Shutdown by signal: SIGTERM or SIGINT cancels a token that the running
//! services watch.

use tokio_util::sync::CancellationToken;

/// Cancel `token` on the first SIGTERM or SIGINT (Ctrl-C).
pub fn cancel_on_signal(token: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
            _ = token.cancelled() => return,
        }
        token.cancel();
    });
    Ok(())
}
