//! The measure's latency in blocks: what compare's block bootstrap resamples.

use std::time::Duration;

use hdrhistogram::Histogram;
use iohr_domain::histogram::{HistogramError, encode, latency_histogram};
use iohr_domain::load::{operation_block_group, operation_block_histogram};

use super::super::recorder::Window;
use super::MAX_BLOCKS;

/// The measure's latency in consecutive blocks, kept as the seconds come: the total's
/// (at most [`MAX_BLOCKS`]) and each operation's, whose blocks span `group` of the
/// total's (see [`operation_block_group`]), so memory stays constant.
pub(super) struct Blocks {
    pub(super) seconds: u64,
    group: u64,
    total: Histogram<u64>,
    seconds_filled: u64,
    operations: Vec<Histogram<u64>>,
    blocks_filled: u64,
    encoded: Vec<String>,
    operations_encoded: Vec<Vec<String>>,
}

impl Blocks {
    pub(super) fn new(duration: Duration, operations: usize) -> Result<Blocks, HistogramError> {
        let seconds = duration.as_secs().div_ceil(MAX_BLOCKS).max(1);
        let group = operation_block_group(duration.as_secs().div_ceil(seconds), operations);
        Ok(Blocks {
            seconds,
            group,
            total: latency_histogram()?,
            seconds_filled: 0,
            operations: (0..operations)
                .map(|_| operation_block_histogram())
                .collect::<Result<_, _>>()?,
            blocks_filled: 0,
            encoded: Vec::new(),
            operations_encoded: vec![Vec::new(); operations],
        })
    }

    pub(super) fn operation_seconds(&self) -> u64 {
        self.seconds * self.group
    }

    pub(super) fn add_second(&mut self, window: &Window) -> Result<(), HistogramError> {
        let _ = self.total.add(window.total_latency()?);
        for (block, latency) in self.operations.iter_mut().zip(&window.latency) {
            // Both bounded by the same largest latency, so this cannot fail.
            let _ = block.add(latency);
        }
        self.seconds_filled += 1;
        if self.seconds_filled == self.seconds {
            self.close_total()?;
        }
        Ok(())
    }

    fn close_total(&mut self) -> Result<(), HistogramError> {
        self.encoded.push(encode(&self.total)?);
        self.total.reset();
        self.seconds_filled = 0;
        self.blocks_filled += 1;
        if self.blocks_filled == self.group {
            self.close_operations()?;
        }
        Ok(())
    }

    fn close_operations(&mut self) -> Result<(), HistogramError> {
        for (kept, block) in self.operations_encoded.iter_mut().zip(&mut self.operations) {
            kept.push(encode(block)?);
            block.reset();
        }
        self.blocks_filled = 0;
        Ok(())
    }

    /// The encoded blocks, with the last partial ones (a block of no latency is not kept).
    pub(super) fn finish(mut self) -> Result<(Vec<String>, Vec<Vec<String>>), HistogramError> {
        if !self.total.is_empty() {
            self.close_total()?;
        }
        if self.blocks_filled > 0 {
            self.close_operations()?;
        }
        Ok((self.encoded, self.operations_encoded))
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::recorder::Phase;
    use super::*;

    #[test]
    fn operation_blocks_span_whole_total_blocks_and_keep_the_last_partial_one() {
        use iohr_domain::histogram::decode;
        // 21 operations of a minute: one-second total blocks, two-second operation blocks
        // (21 x 60 is past the result's budget of operation blocks).
        let mut blocks = Blocks::new(Duration::from_secs(60), 21).expect("blocks");
        assert_eq!((blocks.seconds, blocks.operation_seconds()), (1, 2));
        // The run stops after 59 seconds; operation 0 answers in `second` ms.
        for second in 1..=59u64 {
            let mut window = Window::new(21, Phase::Measure).expect("window");
            window.latency[0].record(second * 1000).expect("record");
            window.latency[20].record(7).expect("record");
            blocks.add_second(&window).expect("second");
        }
        let (total, operations) = blocks.finish().expect("finish");
        assert_eq!(total.len(), 59);
        assert_eq!(operations.len(), 21);
        assert!(operations.iter().all(|o| o.len() == 30));
        let first = decode(&operations[0][0]).expect("decode");
        assert_eq!((first.len(), first.min(), first.max() / 1000), (2, 1000, 2));
        let last = decode(&operations[0][29]).expect("decode");
        assert_eq!((last.len(), last.max() / 1000), (1, 59));
        assert_eq!(decode(&operations[20][29]).expect("decode").len(), 1);
        assert_eq!(decode(&total[58]).expect("decode").len(), 2);
    }
}
