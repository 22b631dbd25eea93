//! Latency histograms as frames carry them: HdrHistogram (microseconds, 3 significant
//! digits, up to an hour), serialized V2 + deflate and base64-encoded, so the controller
//! can merge seconds, operations and agents exactly and read any percentile afterwards.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// The largest latency recorded: an hour, in microseconds.
pub const MAX_MICROS: u64 = 3_600_000_000;

#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    #[error("histogram: {0}")]
    Create(#[from] hdrhistogram::CreationError),
    #[error("histogram encoding: {0}")]
    Encode(String),
    #[error("histogram decoding: {0}")]
    Decode(String),
}

/// An empty latency histogram in microseconds.
pub fn latency_histogram() -> Result<Histogram<u64>, HistogramError> {
    Ok(Histogram::new_with_bounds(1, MAX_MICROS, 3)?)
}

/// V2 + deflate, base64: what a `load` frame carries.
pub fn encode(histogram: &Histogram<u64>) -> Result<String, HistogramError> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(histogram, &mut bytes)
        .map_err(|e| HistogramError::Encode(format!("{e:?}")))?;
    Ok(STANDARD.encode(bytes))
}

pub fn decode(text: &str) -> Result<Histogram<u64>, HistogramError> {
    let bytes = STANDARD
        .decode(text)
        .map_err(|e| HistogramError::Decode(e.to_string()))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| HistogramError::Decode(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_keeps_every_count_and_merges_exactly() {
        let mut total = latency_histogram().expect("histogram");
        let mut seconds = Vec::new();
        for second in 0..5u64 {
            let mut h = latency_histogram().expect("histogram");
            for i in 0..1000u64 {
                let micros = 100 + (i * 37 + second * 1000) % 250_000;
                h.record(micros).expect("record");
                total.record(micros).expect("record");
            }
            seconds.push(encode(&h).expect("encode"));
        }
        let mut merged = latency_histogram().expect("histogram");
        for text in &seconds {
            merged.add(decode(text).expect("decode")).expect("merge");
        }
        assert_eq!(merged, total, "merged seconds are exactly the whole");
        assert_eq!(
            merged.value_at_quantile(0.99),
            total.value_at_quantile(0.99)
        );
        assert!(decode("not base64!").is_err());
        assert!(decode(&STANDARD.encode(b"not a histogram")).is_err());
    }
}
