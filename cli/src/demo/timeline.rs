//! The demo's output as it happens: elapsed time, a tag, what happened;
//! the model's live text inline as it streams.

use std::fmt::Display;
use std::io::Write;
use std::time::Instant;

/// Prints the timeline: elapsed time, a tag, what happened; live model
/// text inline as it streams.
pub(super) struct Timeline {
    start: Instant,
    streaming: bool,
}

impl Timeline {
    pub(super) fn start() -> Timeline {
        Timeline {
            start: Instant::now(),
            streaming: false,
        }
    }

    pub(super) fn line(&mut self, tag: &str, text: impl Display) {
        self.end_stream();
        println!(
            "{:>6.1}s  {tag:<11} {text}",
            self.start.elapsed().as_secs_f64()
        );
    }

    pub(super) fn delta(&mut self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        if !self.streaming {
            let _ = write!(
                stdout,
                "{:>6.1}s  {:<11} ▸ ",
                self.start.elapsed().as_secs_f64(),
                "model"
            );
            self.streaming = true;
        }
        let _ = write!(stdout, "{text}");
        let _ = stdout.flush();
    }

    fn end_stream(&mut self) {
        if self.streaming {
            println!();
            self.streaming = false;
        }
    }
}
