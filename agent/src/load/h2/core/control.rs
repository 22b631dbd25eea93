//! The connection's control frames: SETTINGS, WINDOW_UPDATE and PRIORITY, and the bound
//! on the answers they and PING make us queue. Apart from the streams' frames in
//! [`super`] only to keep each file short.

use super::{ConnError, Core, FLOW_CONTROL, FRAME_SIZE, Head, MAX_QUEUED, PROTOCOL, Woken, frame};
use crate::load::client::Failure;

impl Core {
    pub(super) fn settings(
        &mut self,
        head: Head,
        payload: &[u8],
        woken: &mut Woken,
    ) -> Result<(), ConnError> {
        if head.stream != 0 {
            return Err(PROTOCOL);
        }
        if head.flags & frame::ACK != 0 {
            return if payload.is_empty() {
                Ok(())
            } else {
                Err(FRAME_SIZE)
            };
        }
        if !payload.len().is_multiple_of(6) {
            return Err(FRAME_SIZE);
        }
        self.room_for_control()?;
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                frame::SETTINGS_ENABLE_PUSH if value != 0 => return Err(PROTOCOL),
                frame::SETTINGS_MAX_CONCURRENT_STREAMS => {
                    self.max_concurrent = value as usize;
                    woken.append(&mut self.room);
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return Err(FLOW_CONTROL);
                    }
                    let delta = value - self.peer_initial_window;
                    self.peer_initial_window = value;
                    for slot in self.streams.values_mut() {
                        slot.send_window += delta;
                        if slot.send_window > frame::MAX_WINDOW {
                            return Err(FLOW_CONTROL);
                        }
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=(1 << 24) - 1).contains(&value) {
                        return Err(PROTOCOL);
                    }
                    self.peer_max_frame = value as usize;
                }
                // The table size is for an encoder that indexes: ours never does.
                _ => {}
            }
        }
        frame::settings_ack(&mut self.out);
        self.settings_seen = true;
        self.send_bodies();
        Ok(())
    }

    /// PRIORITY asks nothing of a client (its scheme is deprecated, 5.3.2), but its size
    /// is still checked (6.3).
    pub(super) fn priority(
        &mut self,
        head: Head,
        payload: &[u8],
        woken: &mut Woken,
    ) -> Result<(), ConnError> {
        if head.stream == 0 {
            return Err(PROTOCOL);
        }
        if payload.len() == 5 {
            return Ok(());
        }
        if head.stream.is_multiple_of(2) || head.stream >= self.next_id {
            // RST_STREAM may not name an idle stream (6.4): the stream error becomes a
            // connection error (5.4.1).
            return Err(FRAME_SIZE);
        }
        // A closed stream is left alone: nothing may be sent on it but PRIORITY (5.1).
        if self
            .streams
            .get(&head.stream)
            .is_some_and(|s| s.outcome.is_none())
        {
            self.stream_error(head.stream, frame::FRAME_SIZE_ERROR, woken);
        }
        Ok(())
    }

    pub(super) fn window_update(
        &mut self,
        head: Head,
        payload: &[u8],
        woken: &mut Woken,
    ) -> Result<(), ConnError> {
        let bytes: [u8; 4] = payload.try_into().map_err(|_| FRAME_SIZE)?;
        let increment = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
        if head.stream >= self.next_id {
            return Err(PROTOCOL); // an idle stream (5.1)
        }
        if head.stream == 0 {
            if increment == 0 {
                return Err(PROTOCOL);
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return Err(FLOW_CONTROL);
            }
        } else if let Some(slot) = self.streams.get_mut(&head.stream) {
            slot.send_window += increment;
            if increment == 0 {
                self.stream_error(head.stream, frame::PROTOCOL_ERROR, woken);
            } else if slot.send_window > frame::MAX_WINDOW {
                self.stream_error(head.stream, frame::FLOW_CONTROL_ERROR, woken);
            }
        }
        self.send_bodies();
        Ok(())
    }

    /// A peer that makes us answer (PING, SETTINGS) while it does not read what we
    /// write would grow the queue without end: past [`MAX_QUEUED`] bytes of answers not
    /// yet taken by the driver it is told ENHANCE_YOUR_CALM and the connection ends.
    /// Requests' own bytes do not count: they are bounded by the workers and windows.
    pub(super) fn room_for_control(&mut self) -> Result<(), ConnError> {
        if self.control_queued > MAX_QUEUED {
            return Err(ConnError {
                code: frame::ENHANCE_YOUR_CALM,
                failure: Failure::Protocol,
            });
        }
        self.control_queued += frame::HEAD_LEN + 8;
        Ok(())
    }
}
