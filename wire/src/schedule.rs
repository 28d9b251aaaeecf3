//! When a schedule fires (sql/schema/schedules.sql): the slots of a cron
//! expression in an IANA time zone (the `croner` crate over `chrono-tz`'s
//! time zone database) or of a fixed interval, and what maintenance does
//! with the slots that came due while nobody looked.
//!
//! Cron slots are wall-clock times in the schedule's zone: across a
//! daylight-saving change `0 8 * * *` stays at 08:00 local time, so its UTC
//! instant moves by the hour. A time the spring-forward gap skips fires at
//! the first instant after the gap (02:30 on a night that jumps from 02:00
//! to 03:00 fires at 03:00); a time the fall-back repeats fires once, at
//! its first occurrence.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::duration::parse_duration;

/// The shortest interval of an `every` schedule.
pub const MIN_EVERY: Duration = Duration::from_secs(1);

/// How a schedule repeats.
#[derive(Clone, Debug)]
pub enum Recurrence {
    /// A cron expression (5 fields, or 6 with seconds first) read in a zone.
    Cron { cron: Box<Cron>, zone: Tz },
    /// A fixed interval.
    Every(Duration),
}

/// Parse a cron expression; the error says what is wrong with it.
pub fn parse_cron(text: &str) -> Result<Cron, String> {
    Cron::new(text)
        .with_seconds_optional()
        .parse()
        .map_err(|e| format!("cron {text:?} is not a cron expression: {e}"))
}

/// Parse an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_zone(text: &str) -> Result<Tz, String> {
    text.parse::<Tz>()
        .map_err(|_| format!("unknown time zone {text:?}: use an IANA name such as Europe/Berlin"))
}

/// Parse an `every` interval (`15m`, `2s`, `1h`), at least [`MIN_EVERY`].
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let every = parse_duration(text)?;
    if every < MIN_EVERY {
        return Err(format!("every must be at least 1s, not {text:?}"));
    }
    Ok(every)
}

/// An interval as `parse_every` reads it: the largest unit that divides it.
pub fn format_every(every: Duration) -> String {
    let ms = every.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1_000) => format!("{}s", ms / 1_000),
        _ => format!("{ms}ms"),
    }
}

/// The recurrence of a stored schedule: its cron expression in its zone, or
/// its interval.
pub fn recurrence(
    cron: Option<&str>,
    timezone: &str,
    every: Option<Duration>,
) -> Result<Recurrence, String> {
    match (cron, every) {
        (Some(cron), None) => Ok(Recurrence::Cron {
            cron: Box::new(parse_cron(cron)?),
            zone: parse_zone(timezone)?,
        }),
        (None, Some(every)) => Ok(Recurrence::Every(every)),
        _ => Err("give either cron or every".into()),
    }
}

/// A schedule's slots: its recurrence between `start_at` and `end_at`.
#[derive(Clone, Debug)]
pub struct Timing {
    pub recurrence: Recurrence,
    /// The first slot of an `every` schedule is `start_at`, else its
    /// creation plus one interval; a cron schedule's first slot is its
    /// first match at or after `start_at` (or creation).
    pub start_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// No slot after this.
    pub end_at: Option<DateTime<Utc>>,
}

impl Timing {
    /// The first slot at or after `t`, if one comes before `end_at`.
    pub fn first_at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let slot = match &self.recurrence {
            Recurrence::Every(every) => {
                let every = TimeDelta::from_std(*every).ok()?;
                let anchor = self.start_at.unwrap_or(self.created_at + every);
                if t <= anchor {
                    anchor
                } else {
                    let step = every.num_microseconds()?;
                    let behind = (t - anchor).num_microseconds()?;
                    let steps = behind.div_euclid(step) + i64::from(behind.rem_euclid(step) != 0);
                    anchor + TimeDelta::microseconds(steps.checked_mul(step)?)
                }
            }
            Recurrence::Cron { cron, zone } => {
                let from = self.start_at.map_or(t, |start| t.max(start));
                cron_at_or_after(cron, *zone, from)?
            }
        };
        match self.end_at {
            Some(end) if slot > end => None,
            _ => Some(slot),
        }
    }

    /// The first slot after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.first_at_or_after(t + TimeDelta::microseconds(1))
    }

    /// The latest slot from `from` to `to`, both included. Slots are
    /// stepped through: the caller bounds the span (by the on-time
    /// tolerance), and an interval's slots are counted, not stepped.
    fn last_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = self.first_at_or_after(from).filter(|slot| *slot <= to)?;
        if let Recurrence::Every(every) = &self.recurrence {
            let step = TimeDelta::from_std(*every).ok()?;
            let steps = (to - first).num_microseconds()? / step.num_microseconds()?;
            return Some(first + TimeDelta::microseconds(steps * step.num_microseconds()?));
        }
        let mut last = first;
        while let Some(slot) = self.next_after(last).filter(|slot| *slot <= to) {
            last = slot;
        }
        Some(last)
    }

    /// What to do with a claimed schedule whose next slot `due` has come,
    /// judged at `now`: fire the latest slot that is on time (at most
    /// `late_after` past, not past `end_at`), and report the ones before it
    /// as missed; with no slot on time, `missed = once` fires `due` late
    /// and reports the rest as missed, `skip` fires nothing. Then the first
    /// slot after `now`.
    pub fn plan(
        &self,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
        late_after: Duration,
        missed: MissedPolicy,
    ) -> FirePlan {
        let horizon = self.end_at.map_or(now, |end| end.min(now));
        let late_after = TimeDelta::from_std(late_after).unwrap_or(TimeDelta::MAX);
        let on_time = self.last_between(due.max(now - late_after), horizon);
        let next_fire_at = self.next_after(now);
        // A skipped range ends (exclusive) at the slot that was not skipped:
        // the one fired, or the next one planned.
        let rest = next_fire_at.unwrap_or(horizon);
        let (fire, missed) = match (on_time, missed) {
            (Some(slot), _) if slot == due => (Some((slot, false)), None),
            (Some(slot), _) => (Some((slot, false)), Some((due, slot))),
            (None, MissedPolicy::Once) => (
                Some((due, true)),
                self.next_after(due)
                    .filter(|after| *after <= horizon)
                    .map(|after| (after, rest)),
            ),
            (None, MissedPolicy::Skip) => (None, Some((due, rest))),
        };
        FirePlan {
            missed,
            fire,
            next_fire_at,
        }
    }
}

/// The first match of `cron` in `zone` at or after `t`. croner searches in
/// local time: a time in a spring-forward gap is matched at the gap's end
/// only by a search that starts before the gap, and a time in a repeated
/// (fall-back) hour may be answered at an instant before the start. So the
/// search starts an hour early (the longest gap there is) and steps past
/// the answers before `t`.
fn cron_at_or_after(cron: &Cron, zone: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut from = (t - TimeDelta::hours(1)).with_timezone(&zone);
    let mut inclusive = true;
    // An hour of a cron with seconds is 3,600 matches; each step moves at
    // least a second of local time forward.
    for _ in 0..8_000 {
        let found = cron.find_next_occurrence(&from, inclusive).ok()?;
        if found.with_timezone(&Utc) >= t {
            return Some(found.with_timezone(&Utc));
        }
        from = found;
        inclusive = false;
    }
    None
}

/// A schedule's policy for slots maintenance was too late for.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum MissedPolicy {
    /// Late slots are skipped (recorded as `schedule.skipped`).
    #[default]
    Skip,
    /// After downtime, fire once for all the late slots.
    Once,
}

/// What [`Timing::plan`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirePlan {
    /// Late slots not fired: those from the first up to, not including, the
    /// second (the slot fired, or the next one planned).
    pub missed: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// The slot to fire, and whether it fires late.
    pub fire: Option<(DateTime<Utc>, bool)>,
    /// The first slot after now; `None`: the schedule has ended.
    pub next_fire_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn every(secs: u64, start: &str) -> Timing {
        Timing {
            recurrence: Recurrence::Every(Duration::from_secs(secs)),
            start_at: Some(at(start)),
            created_at: at(start),
            end_at: None,
        }
    }

    #[test]
    fn every_slots_sit_on_the_grid_from_start() {
        let timing = every(2, "2026-01-01T00:00:00Z");
        assert_eq!(
            timing.first_at_or_after(at("2026-01-01T00:00:03Z")),
            Some(at("2026-01-01T00:00:04Z"))
        );
        assert_eq!(
            timing.next_after(at("2026-01-01T00:00:04Z")),
            Some(at("2026-01-01T00:00:06Z"))
        );
    }

    #[test]
    fn an_on_time_slot_fires_and_the_late_ones_before_it_are_missed() {
        let timing = every(2, "2026-01-01T00:00:00Z");
        let plan = timing.plan(
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:00:30.5Z"),
            Duration::from_secs(1),
            MissedPolicy::Skip,
        );
        assert_eq!(plan.fire, Some((at("2026-01-01T00:00:30Z"), false)));
        // With a wide tolerance, still the latest slot, not the earliest.
        let wide = timing.plan(
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:00:30.5Z"),
            Duration::from_secs(60),
            MissedPolicy::Skip,
        );
        assert_eq!(wide, plan);
        assert_eq!(
            plan.missed,
            Some((at("2026-01-01T00:00:00Z"), at("2026-01-01T00:00:30Z")))
        );
        assert_eq!(plan.next_fire_at, Some(at("2026-01-01T00:00:32Z")));
    }

    #[test]
    fn with_no_slot_on_time_once_fires_late_and_skip_does_not() {
        let timing = every(3600, "2026-01-01T00:00:00Z");
        let due = at("2026-01-01T00:00:00Z");
        let now = at("2026-01-01T00:00:40Z");
        let late = Duration::from_secs(10);
        let once = timing.plan(due, now, late, MissedPolicy::Once);
        assert_eq!(once.fire, Some((due, true)));
        assert_eq!(once.missed, None);
        let skip = timing.plan(due, now, late, MissedPolicy::Skip);
        assert_eq!(skip.fire, None);
        assert_eq!(skip.missed, Some((due, at("2026-01-01T01:00:00Z"))));
        assert_eq!(skip.next_fire_at, Some(at("2026-01-01T01:00:00Z")));
    }

    #[test]
    fn a_slot_at_the_end_of_a_dst_gap_is_found_from_itself() {
        let timing = Timing {
            recurrence: Recurrence::Cron {
                cron: Box::new(parse_cron("30 2 * * *").unwrap()),
                zone: parse_zone("Europe/Berlin").unwrap(),
            },
            start_at: None,
            created_at: at("2026-03-01T00:00:00Z"),
            end_at: None,
        };
        let gap_end = at("2026-03-29T01:00:00Z");
        assert_eq!(timing.first_at_or_after(gap_end), Some(gap_end));
        assert_eq!(
            timing.first_at_or_after(at("2026-03-29T00:59:00Z")),
            Some(gap_end)
        );
    }

    #[test]
    fn end_at_ends_the_slots() {
        let mut timing = every(2, "2026-01-01T00:00:00Z");
        timing.end_at = Some(at("2026-01-01T00:00:05Z"));
        assert_eq!(timing.next_after(at("2026-01-01T00:00:04Z")), None);
    }

    #[test]
    fn parses_and_refuses() {
        assert!(parse_cron("0 8 * * 1-5").is_ok());
        assert!(parse_cron("*/2 * * * * *").is_ok());
        assert!(parse_cron("61 * * * *").is_err());
        assert!(parse_zone("Europe/Berlin").is_ok());
        assert!(parse_zone("Mars/Olympus").is_err());
        assert!(parse_every("500ms").is_err());
        assert_eq!(parse_every("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(format_every(Duration::from_secs(900)), "15m");
        assert_eq!(format_every(Duration::from_millis(1500)), "1500ms");
    }
}
