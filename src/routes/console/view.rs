//! What the console's templates show, prepared as text: provider-supplied strings stay as
//! they are here (askama escapes them when it renders), a raw body is re-indented without
//! being re-encoded, and the per-minute chart is laid out as SVG rectangles.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::deliveries::minutes::MinuteCount;
use crate::deliveries::read::{EventFilter, EventOutcome, EventRow};

/// Percent-encodes `s` for a URL path segment or query value (RFC 3986 unreserved kept).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The query string (`a=1&b=2`) of `filter`, without paging.
pub fn filter_query(filter: &EventFilter) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(v) = &filter.provider {
        pairs.push(("provider", v.clone()));
    }
    if let Some(v) = filter.merchant_id {
        pairs.push(("merchant_id", v.to_string()));
    }
    if let Some(v) = filter.outcome {
        pairs.push(("outcome", v.as_str().to_owned()));
    }
    if let Some(v) = &filter.event_type {
        pairs.push(("type", v.clone()));
    }
    if let Some(v) = filter.since {
        pairs.push(("since", time(v)));
    }
    if let Some(v) = filter.until {
        pairs.push(("until", time(v)));
    }
    if let Some(v) = &filter.event_id {
        pairs.push(("event_id", v.clone()));
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// One row of an event table.
pub struct EventLine {
    pub received_at: String,
    pub provider: String,
    pub event_id: String,
    pub href: String,
    pub merchant_id: i64,
    pub event_type: String,
    /// Also the row's colour class.
    pub outcome: String,
    pub reason: String,
    pub status: String,
    pub transfer_id: String,
}

impl From<&EventRow> for EventLine {
    fn from(e: &EventRow) -> Self {
        Self {
            received_at: time(e.received_at),
            provider: e.provider.clone(),
            event_id: e.event_id.clone(),
            href: format!(
                "/console/events/{}/{}",
                encode(&e.provider),
                encode(&e.event_id)
            ),
            merchant_id: e.merchant_id,
            event_type: e.event_type.clone().unwrap_or_default(),
            outcome: outcome_class(e.outcome.as_deref()).to_owned(),
            reason: e.reason.clone().unwrap_or_default(),
            status: e.status.map(|s| s.to_string()).unwrap_or_default(),
            transfer_id: e.transfer_id.map(|t| t.to_string()).unwrap_or_default(),
        }
    }
}

/// A stored outcome as a class name: one of the four, or `unknown` (never provider text).
/// An amount as finance reads it, in major units with its currency (1999 USD as "19.99 USD"),
/// or nothing for a code ISO 4217 does not know; shown beside the minor units.
pub fn major(amount_minor: impl Into<i128>, currency: &str) -> String {
    crate::money::major_units(amount_minor.into(), currency)
        .map(|major| format!("{major} {currency}"))
        .unwrap_or_default()
}

pub fn outcome_class(outcome: Option<&str>) -> &'static str {
    outcome
        .and_then(EventOutcome::parse)
        .map_or("unknown", EventOutcome::as_str)
}

/// `json` re-indented, two spaces a level; the characters of every string, key and number are
/// kept exactly as sent (nothing is re-encoded, so a `<` stays `<` and key order is kept). Text
/// that is not JSON comes back as it is.
pub fn pretty_json(json: &str) -> String {
    if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let close = if c == '{' { '}' } else { ']' };
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if chars.peek() == Some(&close) {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

pub struct Bar {
    pub outcome: &'static str,
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    pub label: String,
}

/// Callbacks per minute by outcome, stacked bars over the last 60 minutes.
pub struct Chart {
    pub width: u32,
    pub height: u32,
    pub max: i64,
    pub bars: Vec<Bar>,
    /// (outcome, total over the hour)
    pub legend: Vec<(&'static str, i64)>,
}

const MINUTES: i64 = 60;
const BAR_WIDTH: u32 = 14;
const CHART_HEIGHT: u32 = 160;
const STACK_ORDER: [&str; 5] = ["applied", "held", "ignored", "rejected", "unknown"];

impl Chart {
    /// `counts` from `per_minute` since `now` minus an hour.
    pub fn of(counts: &[MinuteCount], now: DateTime<Utc>) -> Self {
        let last_minute = now.timestamp().div_euclid(60);
        let first_minute = last_minute - (MINUTES - 1);
        let mut per_minute: BTreeMap<i64, [i64; 5]> = BTreeMap::new();
        let mut totals = [0i64; 5];
        for c in counts {
            let slot = STACK_ORDER
                .iter()
                .position(|o| *o == outcome_class(Some(&c.outcome)))
                .unwrap_or(4);
            if (first_minute..=last_minute).contains(&c.minute) {
                per_minute.entry(c.minute).or_default()[slot] += c.count;
                totals[slot] += c.count;
            }
        }
        let max = per_minute
            .values()
            .map(|v| v.iter().sum::<i64>())
            .max()
            .unwrap_or(0);
        let mut bars = Vec::new();
        for (minute, stack) in &per_minute {
            let x = u32::try_from(minute - first_minute).unwrap_or(0) * BAR_WIDTH;
            let mut top = CHART_HEIGHT;
            for (slot, count) in stack.iter().enumerate() {
                if *count == 0 || max == 0 {
                    continue;
                }
                let h = u32::try_from(
                    (i128::from(*count) * i128::from(CHART_HEIGHT - 20) / i128::from(max)).max(1),
                )
                .unwrap_or(1);
                top = top.saturating_sub(h);
                let at = DateTime::from_timestamp(minute * 60, 0).unwrap_or(now);
                bars.push(Bar {
                    outcome: STACK_ORDER[slot],
                    x,
                    y: top,
                    w: BAR_WIDTH - 2,
                    h,
                    label: format!("{} {}: {count}", at.format("%H:%M"), STACK_ORDER[slot]),
                });
            }
        }
        Self {
            width: BAR_WIDTH * MINUTES as u32,
            height: CHART_HEIGHT,
            max,
            bars,
            legend: STACK_ORDER.iter().copied().zip(totals).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_amount_is_shown_in_major_units_with_its_currency() {
        assert_eq!(major(1999_i64, "USD"), "19.99 USD");
        assert_eq!(major(-700_i128, "EUR"), "-7.00 EUR");
        assert_eq!(major(1999_i64, "XYZ"), "");
    }

    #[test]
    fn a_pretty_body_keeps_its_characters_and_key_order() {
        let body =
            r#"{"z":1,"a":{"note":"<script>alert(1)</script>","q":"a\"b,{c}:"},"e":[],"l":[1,2]}"#;
        let pretty = pretty_json(body);
        assert!(
            pretty.contains(r#""note": "<script>alert(1)</script>""#),
            "{pretty}"
        );
        assert!(pretty.contains(r#""q": "a\"b,{c}:""#), "{pretty}");
        assert!(pretty.find("\"z\"") < pretty.find("\"a\""));
        assert!(pretty.contains("\"e\": []"));
        let reparsed: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(
            reparsed,
            serde_json::from_str::<serde_json::Value>(body).unwrap()
        );
    }

    #[test]
    fn text_that_is_not_json_is_shown_as_it_is() {
        assert_eq!(pretty_json("not {json"), "not {json");
    }

    #[test]
    fn a_path_segment_is_percent_encoded() {
        assert_eq!(encode("evt 1/<x>"), "evt%201%2F%3Cx%3E");
    }

    #[test]
    fn an_unknown_outcome_never_becomes_a_class_name() {
        assert_eq!(outcome_class(Some("held")), "held");
        assert_eq!(outcome_class(Some("x\" onmouseover=")), "unknown");
        assert_eq!(outcome_class(None), "unknown");
    }

    #[test]
    fn the_chart_stacks_each_minute_by_outcome() {
        let now = DateTime::from_timestamp(60 * 1000 + 30, 0).unwrap();
        let counts = [
            MinuteCount {
                minute: 1000,
                outcome: "applied".into(),
                count: 10,
            },
            MinuteCount {
                minute: 1000,
                outcome: "held".into(),
                count: 5,
            },
            MinuteCount {
                minute: 999,
                outcome: "rejected".into(),
                count: 1,
            },
            MinuteCount {
                minute: 900,
                outcome: "applied".into(),
                count: 99,
            },
        ];
        let chart = Chart::of(&counts, now);
        assert_eq!(chart.max, 15);
        assert_eq!(chart.bars.len(), 3);
        assert_eq!(chart.legend[0], ("applied", 10));
        let applied = &chart.bars[1];
        assert_eq!((applied.outcome, applied.x), ("applied", 59 * BAR_WIDTH));
    }
}
