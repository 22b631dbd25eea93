//! A run's frames for one viewer: the stored ones after its resume point, then the live
//! ones from the hub, in order and without gaps, ending with `finished`. Every surface
//! that shows a run's frames streams them from here (SSE `GET /runs/{id}/events`, gRPC
//! `WatchRun`, the WebSocket, the console's live plots) and translates each frame in its
//! own terms.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::Shared;
use crate::hub::Subscription;
use crate::store::StoredFrame;

/// Frames read from the store per query while replaying.
const PAGE: u32 = 500;

/// The frames of a run after `after`, stored ones first, then live ones, in order and
/// without gaps, ending with `finished`. Served as SSE here and over gRPC by `WatchRun`.
/// `live` must be taken before this is called (see `crate::viewers::join`): a frame published while
/// the store is read is then seen twice at worst (and dropped by number), never missed.
///
/// Live frames come from the hub, straight: the store is read only to catch up (at the
/// start, after the viewer lagged past its run's broadcast, or while the stored frames
/// have a gap an agent has yet to fill).
pub fn frame_stream(
    shared: Shared,
    run_id: String,
    after: u64,
    live: Subscription,
) -> impl Stream<Item = Arc<StoredFrame>> + Send {
    let viewer = Viewer {
        shared,
        run_id,
        live,
        pending: VecDeque::new(),
        last: after,
        done: false,
        catch_up: true,
        gapped: false,
    };
    futures_util::stream::unfold(viewer, |mut viewer| async move {
        let frame = viewer.next().await?;
        Some((frame, viewer))
    })
}

struct Viewer {
    shared: Shared,
    run_id: String,
    live: Subscription,
    /// Frames to emit, in order, each `last + 1` of the one before.
    pending: VecDeque<Arc<StoredFrame>>,
    /// The last frame number emitted (or the resume point).
    last: u64,
    done: bool,
    /// The store may hold frames past `last` that the live broadcast will not bring.
    catch_up: bool,
    /// The last read stopped at a gap: frames past it are stored and were seen live
    /// already, so the frame that fills the gap is read from the store with them.
    gapped: bool,
}

impl Viewer {
    async fn next(&mut self) -> Option<Arc<StoredFrame>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(frame) = self.pending.pop_front() {
                self.last = frame.number;
                self.done = frame.kind == "finished";
                return Some(frame);
            }
            if self.catch_up {
                self.read_store().await?;
                continue;
            }
            tokio::select! {
                received = self.live.frames.recv() => match received {
                    Ok(frame) if frame.number <= self.last => {}
                    Ok(frame) if frame.number == self.last + 1 && !self.gapped => {
                        self.pending.push_back(frame);
                    }
                    // Past a gap (or filling one): the store has the whole sequence.
                    Ok(_) | Err(RecvError::Lagged(_)) => self.catch_up = true,
                    Err(RecvError::Closed) => return None,
                },
                _ = self.shared.shutdown.cancelled() => return None,
            }
        }
    }

    /// One page from the store into `pending`; `None` when the stream is over or the
    /// store failed.
    async fn read_store(&mut self) -> Option<()> {
        let (shared, run_id) = (&self.shared, &self.run_id);
        // Whether the run has ended, asked before reading its frames: an ended run's
        // frames are all stored, so what is read then is all there is.
        let ended = match shared.store.run(run_id).await {
            Ok(run) => run.is_none_or(|r| r.status.is_finished()),
            Err(error) => {
                tracing::error!(run = %run_id, %error, "reading a run for a viewer failed");
                return None;
            }
        };
        let stored = match shared.store.frames_after(run_id, self.last, PAGE).await {
            Ok(frames) => frames,
            Err(error) => {
                tracing::error!(run = %run_id, %error, "reading frames for a viewer failed");
                return None;
            }
        };
        let full = stored.len() >= PAGE as usize;
        if ended {
            // Everything left, past any gap an agent never filled, then the end
            // (nothing at all for a viewer already past `finished`).
            if stored.is_empty() {
                return None;
            }
            self.pending.extend(stored.into_iter().map(Arc::new));
            return Some(());
        }
        // A live run: emit only a gapless run of numbers; a gap fills in later.
        let read = stored.len();
        let mut expected = self.last + 1;
        self.pending.extend(
            stored
                .into_iter()
                .take_while(|f| {
                    let ok = f.number == expected;
                    expected += 1;
                    ok
                })
                .map(Arc::new),
        );
        self.gapped = self.pending.len() < read;
        // A full page may have more behind it; otherwise the broadcast brings the rest.
        self.catch_up = full && !self.gapped;
        Some(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
