//! The trace context every request of a run carries (W3C Trace Context and Baggage), so
//! that the target's telemetry can find all of a run's traffic and tell it from real
//! users':
//!
//! - `traceparent: 00-<run prefix><random>-<span>-<flags>`: the trace id's first 16 hex
//!   digits name the run (the first 8 bytes of sha256 of its id), the last 16 are random
//!   per request, the span id is random; the sampled flag (`01`) is set when the random
//!   half is below `trace_sample × 2^64`, the rule of OpenTelemetry's `TraceIdRatioBased`
//!   sampler, so a backend that samples by ratio agrees with the flag.
//! - `baggage: iohr.run_id=<id>,synthetic=true`.
//!
//! `trace_sample` (each kind's spec, default [`DEFAULT_SAMPLE`]) is the fraction sent
//! sampled; at 0 the headers are still sent, unsampled, so the run's traffic is still
//! told apart and its trace ids still reach the target's logs. The scenario kind keeps its
//! own documented traceparent ([`crate::scenario_kind::Identity`]) and sends the baggage.

use sha2::{Digest, Sha256};

use crate::request::{SpecError, spec_error};

/// The share of requests sent sampled when a spec says nothing.
pub const DEFAULT_SAMPLE: f64 = 0.01;

/// `00-` + 32 + `-` + 16 + `-` + 2.
pub const TRACEPARENT_LEN: usize = 55;

/// What the docs and the record say the traceparent looks like.
pub const TRACEPARENT_FORMAT: &str =
    "00-<sha256(run id)[:16 hex]><random:16 hex>-<random:16 hex>-<01 sampled | 00>";

pub fn default_sample() -> f64 {
    DEFAULT_SAMPLE
}

/// A spec written back leaves the default out, as it came.
pub fn is_default_sample(sample: &f64) -> bool {
    *sample == DEFAULT_SAMPLE
}

/// `trace_sample` is a fraction: 0 (never sampled) to 1 (always).
pub fn validate_sample(field: &str, sample: f64) -> Result<(), SpecError> {
    if sample.is_finite() && (0.0..=1.0).contains(&sample) {
        Ok(())
    } else {
        Err(spec_error(
            field,
            format!(
                "must be a fraction between 0 and 1 (0.01 samples 1% of requests), not {sample}"
            ),
        ))
    }
}

/// The run's half of every trace id: the first 8 bytes of sha256(run id).
pub fn run_prefix(run_id: &str) -> u64 {
    let digest = Sha256::digest(run_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// [`run_prefix`] as the 16 hex digits every trace id of the run starts with.
pub fn run_prefix_hex(run_id: &str) -> String {
    format!("{:016x}", run_prefix(run_id))
}

/// The W3C baggage a run's requests carry: its id (percent-encoded where the baggage
/// grammar needs it) and `synthetic=true`.
pub fn baggage(run_id: &str) -> String {
    let mut out = String::with_capacity(run_id.len() + 32);
    out.push_str("iohr.run_id=");
    for b in run_id.bytes() {
        // W3C baggage-octet: printable ASCII but space, `"`, `,`, `;` and `\`; `%`
        // escapes itself, and `+` too (OpenTelemetry's Python SDK reads it as a space).
        if b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\' | b'%' | b'+') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push_str(",synthetic=true");
    out
}

/// A run's trace context: its prefix and its sampling bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTrace {
    prefix: u64,
    /// A request is sampled when its random half is below this (2^64 samples all).
    bound: u128,
}

impl RunTrace {
    /// The context of `run_id` sampling `sample` (already validated: clamped here).
    pub fn new(run_id: &str, sample: f64) -> RunTrace {
        let sample = if sample.is_finite() {
            sample.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // OpenTelemetry's TraceIdRatioBased: round(rate × 2^64), compared with the trace
        // id's lower 8 bytes.
        let bound = (sample * 18_446_744_073_709_551_616.0).round() as u128;
        RunTrace {
            prefix: run_prefix(run_id),
            bound,
        }
    }

    pub fn prefix(&self) -> u64 {
        self.prefix
    }

    /// Whether a request whose trace id ends in `low` is sent sampled.
    pub fn sampled(&self, low: u64) -> bool {
        u128::from(low) < self.bound
    }

    /// The traceparent of a request whose trace id ends in `low`, with span id `span`
    /// (both random; a zero span, which W3C forbids, is sent as 1).
    pub fn traceparent(&self, low: u64, span: u64) -> [u8; TRACEPARENT_LEN] {
        let mut out = [0u8; TRACEPARENT_LEN];
        out[..3].copy_from_slice(b"00-");
        hex16(self.prefix, &mut out[3..19]);
        hex16(low, &mut out[19..35]);
        out[35] = b'-';
        hex16(span.max(1), &mut out[36..52]);
        out[52] = b'-';
        out[53] = b'0';
        out[54] = if self.sampled(low) { b'1' } else { b'0' };
        out
    }
}

/// `value` as 16 lower-case hex digits, without formatting machinery (once per request).
fn hex16(value: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in out.iter_mut().take(16).enumerate() {
        *byte = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// A traceparent read back: (trace id, span id, flags), or `None` when it is not a valid
/// version-00 header.
pub fn parse_traceparent(text: &str) -> Option<(u128, u64, u8)> {
    let parts: Vec<&str> = text.split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if *version != "00" || !lower_hex(trace, 32) || !lower_hex(span, 16) || !lower_hex(flags, 2) {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let span = u64::from_str_radix(span, 16).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (trace != 0 && span != 0).then_some((trace, span, flags))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_values() {
        // sha256("abc") = ba7816bf 8f01cfea ... (FIPS 180-2, appendix B.1).
        assert_eq!(run_prefix_hex("abc"), "ba7816bf8f01cfea");
        let trace = RunTrace::new("abc", 0.5);
        let tp = trace.traceparent(1, 0xab);
        assert_eq!(
            std::str::from_utf8(&tp).expect("ascii"),
            "00-ba7816bf8f01cfea0000000000000001-00000000000000ab-01"
        );
        let tp = trace.traceparent(u64::MAX, 0);
        assert_eq!(
            std::str::from_utf8(&tp).expect("ascii"),
            "00-ba7816bf8f01cfeaffffffffffffffff-0000000000000001-00"
        );
        assert_eq!(
            baggage("run-1 a,b%"),
            "iohr.run_id=run-1%20a%2Cb%25,synthetic=true"
        );
        assert!(validate_sample("spec.trace_sample", 0.0).is_ok());
        assert!(validate_sample("spec.trace_sample", 1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let e = validate_sample("spec.trace_sample", bad).expect_err("refused");
            assert_eq!(e.field, "spec.trace_sample");
        }
    }

    /// Each kind's spec refuses a trace_sample outside [0, 1] at its field, as every
    /// spec error (the API's `400 invalid_spec`), and leaves the default out when
    /// written back.
    #[test]
    fn specs_refuse_a_sample_outside_zero_to_one() {
        use serde_json::json;
        let load = json!({"operations": [{"path": "/"}], "model": "closed", "connections": 1,
            "duration": "1s", "trace_sample": 1.5});
        let e = crate::load::LoadSpec::from_json(&load)
            .and_then(|s| s.plan())
            .expect_err("refused");
        assert_eq!(e.field, "spec.trace_sample");
        let checks = json!({"checks": [{"path": "/"}], "trace_sample": -1});
        let e = crate::checks::ChecksSpec::from_json(&checks).expect_err("refused");
        assert_eq!(e.field, "spec.trace_sample");
        let replay = json!({"requests": [{"offset_ms": 0, "method": "GET", "path": "/"}],
            "trace_sample": 2});
        let e = crate::replay::ReplaySpec::from_json(&replay)
            .and_then(|s| s.plan())
            .expect_err("refused");
        assert_eq!(e.field, "spec.trace_sample");
        let faults = json!({"title": "t", "description": "d", "method": [], "trace_sample": 3});
        let e = crate::faults::Experiment::from_json(&faults).expect_err("refused");
        assert_eq!(e.field, "trace_sample");
        let ok = json!({"checks": [{"path": "/"}]});
        let spec = crate::checks::ChecksSpec::from_json(&ok).expect("valid");
        assert_eq!(spec.trace_sample, DEFAULT_SAMPLE);
        assert!(
            serde_json::to_value(&spec)
                .expect("json")
                .get("trace_sample")
                .is_none()
        );
    }

    proptest! {
        #![proptest_config(crate::proptests::config(512))]

        /// Every traceparent is valid W3C, starts with the run's prefix, carries the
        /// random half and span it was given, and its flag is the sampling rule's.
        #[test]
        fn traceparents_are_valid_and_name_the_run(
            run_id in "\\PC{0,40}", low in any::<u64>(), span in any::<u64>(), sample in 0.0f64..=1.0,
        ) {
            let trace = RunTrace::new(&run_id, sample);
            let tp = trace.traceparent(low, span);
            let text = std::str::from_utf8(&tp).expect("ascii");
            let (id, got_span, flags) = parse_traceparent(text).expect("valid");
            prop_assert_eq!((id >> 64) as u64, run_prefix(&run_id));
            prop_assert_eq!(id as u64, low);
            prop_assert_eq!(got_span, span.max(1));
            prop_assert_eq!(flags == 1, trace.sampled(low));
            let start = format!("00-{}", run_prefix_hex(&run_id));
            prop_assert!(text.starts_with(&start), "{} {}", text, start);
        }

        /// More sample never unsamples a request; 0 samples none, 1 all.
        #[test]
        fn sampling_is_monotone_with_its_ends(low in any::<u64>(), a in 0.0f64..=1.0, b in 0.0f64..=1.0) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(!RunTrace::new("r", lo).sampled(low) || RunTrace::new("r", hi).sampled(low));
            prop_assert!(!RunTrace::new("r", 0.0).sampled(low));
            prop_assert!(RunTrace::new("r", 1.0).sampled(low));
        }

        /// The baggage value is baggage-octets only and decodes back to the run id.
        #[test]
        fn baggage_round_trips(run_id in "\\PC{0,40}") {
            let text = baggage(&run_id);
            let value = text
                .strip_prefix("iohr.run_id=")
                .and_then(|v| v.strip_suffix(",synthetic=true"))
                .expect("shape");
            prop_assert!(value.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\')));
            let mut bytes = Vec::new();
            let mut rest = value.as_bytes();
            while let Some((&b, tail)) = rest.split_first() {
                if b == b'%' {
                    let hex = std::str::from_utf8(&tail[..2]).expect("ascii");
                    bytes.push(u8::from_str_radix(hex, 16).expect("hex"));
                    rest = &tail[2..];
                } else {
                    bytes.push(b);
                    rest = tail;
                }
            }
            prop_assert_eq!(String::from_utf8(bytes).expect("utf-8"), run_id);
        }

        /// What is not a traceparent is refused without a panic.
        #[test]
        fn parsing_never_panics(text in "\\PC{0,80}") {
            let _ = parse_traceparent(&text);
        }
    }
}
