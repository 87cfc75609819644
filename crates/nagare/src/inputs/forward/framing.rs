//! Cutting forward frames out of a connection's receive buffer without
//! copying, and sizing the buffer's reads so that a big frame lands in an
//! allocation of its own, which an output's buffer then keeps as it is.

use bytes::{Bytes, BytesMut};
use nagare_core::metrics::PluginStats;
use nagare_forward::{scan_frame_resumed, EventFrame, EventTime};

use super::Ctx;
use crate::buffer::SHARE_THRESHOLD;

/// What the next step of cutting frames out of the buffer gave.
pub(super) enum Next {
    Frame(EventFrame),
    /// A frame that is not logs (Fluent Bit metrics or traces): counted, skipped.
    Skipped,
    NeedMore,
}

/// A connection's receive buffer. Frames are cut off it without copying,
/// and an output's buffer keeps a big batch as it is, with the whole
/// allocation it sits in (`buffer::SHARE_THRESHOLD`). So a big frame whose
/// size its header gives is read into an allocation of its own size, and a
/// big frame that arrived in a read shared with other frames is copied out;
/// small frames are copied by the buffer and free the receive buffer once
/// appended.
#[derive(Default)]
pub(super) struct RecvBuf {
    pub(super) buf: BytesMut,
    /// `buf` starts with a frame being read into an allocation of its own.
    own: bool,
    /// How far the scan of the incomplete frame at `buf`'s start got, so a
    /// frame that comes in many reads is scanned once, not once per read.
    progress: nagare_forward::ScanProgress,
}

/// Read size while frames are small (several frames per read).
const READ_SIZE: usize = 256 * 1024;
/// Room after a PackedForward payload for the options map, whose size the
/// header does not give.
const OPTIONS_ROOM: usize = 256;

impl RecvBuf {
    /// Makes room for the next read.
    pub(super) fn make_room(&mut self) {
        let len = self.buf.len();
        // The last scan's least length of the frame at the start (0 when
        // the buffer holds no partial frame).
        let frame = if len == 0 { 0 } else { self.progress.need };
        if frame >= SHARE_THRESHOLD {
            let mut size = frame + OPTIONS_ROOM;
            if !self.own || self.buf.capacity() < size {
                if self.own {
                    // A need that grows read by read (Forward mode: no
                    // header gives the frame's length) doubles the
                    // allocation rather than copying the frame per read.
                    size = size.max(2 * self.buf.capacity());
                }
                self.move_to(size);
                self.own = true;
            }
        } else {
            let want = frame.saturating_sub(len).max(READ_SIZE / 4);
            if self.buf.capacity() - len < want {
                // Reuses the allocation when no frame cut from it is alive.
                self.buf.reserve(want.max(READ_SIZE));
            }
        }
    }

    /// Moves the unread bytes to a new allocation of `size` bytes. The old
    /// one stays only while frames cut from it are alive.
    fn move_to(&mut self, size: usize) {
        let mut moved = BytesMut::with_capacity(size);
        moved.extend_from_slice(&self.buf);
        self.buf = moved;
    }

    /// Cuts the first `len` bytes off (a whole frame).
    fn cut(&mut self, len: usize) -> Bytes {
        let own = std::mem::take(&mut self.own);
        let frame = self.buf.split_to(len);
        if own || len < SHARE_THRESHOLD {
            frame.freeze()
        } else {
            Bytes::copy_from_slice(&frame)
        }
    }
}

/// Entries the codec built (decompressed, or rewritten to canonical times)
/// sit in a Vec that may have grown to twice their size; big ones are copied
/// to an allocation of their size, as the output's buffer keeps them whole.
fn tight(mut frame: EventFrame, received: &Bytes) -> EventFrame {
    let built = !received.as_ptr_range().contains(&frame.entries.as_ptr());
    if built && frame.entries.len() >= SHARE_THRESHOLD {
        frame.entries = Bytes::copy_from_slice(&frame.entries);
    }
    frame
}

/// Cuts the next complete frame off the receive buffer (without copying,
/// see `RecvBuf`) and decodes it.
pub(super) fn next_frame(
    rb: &mut RecvBuf,
    ctx: &Ctx,
    now: EventTime,
    peer: &str,
) -> Result<Next, String> {
    // The connection's log line names the peer; the reason does not repeat it.
    let Some(scanned) =
        scan_frame_resumed(&rb.buf, &ctx.limits, &mut rb.progress).map_err(|e| e.to_string())?
    else {
        return Ok(Next::NeedMore);
    };
    let bytes = rb.cut(scanned.len);
    if let Some(sig @ 1..) = scanned.signal() {
        PluginStats::add(&ctx.stats.errors, 1);
        tracing::warn!(input = %ctx.name, peer = %peer, signal = sig,
            "ignoring a Fluent Bit metrics/traces frame (fluent_signal); only logs are collected");
        return Ok(Next::Skipped);
    }
    scanned
        .into_frame(bytes.clone(), &ctx.limits, now)
        .map(|f| Next::Frame(tight(f, &bytes)))
        .map_err(|e| e.to_string())
}
