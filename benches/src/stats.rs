//! Latency summaries: nearest-rank percentiles over recorded samples.

use std::time::Duration;

use serde_json::{json, Value};

/// Samples in milliseconds, summarised on demand.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    ms: Vec<f64>,
}

impl Samples {
    pub fn new() -> Samples {
        Samples::default()
    }

    pub fn push(&mut self, sample: Duration) {
        self.ms.push(sample.as_secs_f64() * 1000.0);
    }

    pub fn push_ms(&mut self, ms: f64) {
        self.ms.push(ms);
    }

    pub fn extend(&mut self, other: &Samples) {
        self.ms.extend_from_slice(&other.ms);
    }

    pub fn len(&self) -> usize {
        self.ms.len()
    }

    fn sorted(&self) -> Vec<f64> {
        let mut sorted = self.ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
    }

    /// The nearest-rank percentile `p` (0 < p <= 100); NaN when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        nearest_rank(&self.sorted(), p)
    }

    pub fn p50(&self) -> f64 {
        self.percentile(50.0)
    }

    pub fn p99(&self) -> f64 {
        self.percentile(99.0)
    }

    /// `{"n", "p50_ms", "p99_ms", "max_ms", "mean_ms"}`, rounded to µs.
    pub fn summary(&self) -> Value {
        let sorted = self.sorted();
        let mean = if sorted.is_empty() {
            f64::NAN
        } else {
            sorted.iter().sum::<f64>() / sorted.len() as f64
        };
        json!({
            "n": sorted.len(),
            "p50_ms": round3(nearest_rank(&sorted, 50.0)),
            "p99_ms": round3(nearest_rank(&sorted, 99.0)),
            "max_ms": round3(sorted.last().copied().unwrap_or(f64::NAN)),
            "mean_ms": round3(mean),
        })
    }
}

fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Round to three decimals (µs for milliseconds); NaN becomes JSON null.
pub fn round3(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

/// `a / b` rounded to three decimals, null when undefined.
pub fn ratio(a: f64, b: f64) -> Value {
    if b == 0.0 {
        Value::Null
    } else {
        round3(a / b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::new();
        for ms in 1..=100 {
            s.push_ms(ms as f64);
        }
        assert_eq!(s.p50(), 50.0);
        assert_eq!(s.p99(), 99.0);
        assert_eq!(s.percentile(100.0), 100.0);
        let mut one = Samples::new();
        one.push_ms(7.0);
        assert_eq!(one.p99(), 7.0);
        assert!(Samples::new().p50().is_nan());
    }
}
