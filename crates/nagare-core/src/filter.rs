//! Filters: steps between the router and the outputs. A filter sees a
//! whole batch (the PackedForward entries of one tag, as the input made
//! them) and answers with a new batch or "unchanged", so a filter that only
//! looks at the tag copies nothing, and one that needs fields decodes the
//! entries it touches and re-encodes them once into one buffer.

use bytes::Bytes;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::plugin::{
    registration, BuildContext, Built, OptionError, Registration, Section, SectionError,
};

/// What a filter made of a batch.
#[derive(Debug, Default)]
pub struct Filtered {
    /// The new entries (canonical `[time, record]` PackedForward entries)
    /// and their count; `None` when the batch goes on unchanged. A count of
    /// 0 drops the batch (the input still acknowledges it).
    pub batch: Option<(Bytes, u32)>,
    /// A new tag for the whole batch; `None` keeps it. The batch then goes
    /// on through the filters that select the new tag and come after this
    /// one in file order, and to the output the new tag routes to (see
    /// `Router::filter`).
    pub tag: Option<String>,
    /// Events given other tags one by one (rewrite_tag): (new tag, its
    /// entries, their count), each going on like a retagged batch. They are
    /// not in `batch`, which keeps the events that stay.
    pub moved: Vec<(String, Bytes, u32)>,
    /// Events the filter could not treat as configured: counted as errors
    /// of the filter. Without an error label they stay in `batch`, marked
    /// (e.g. a `parse_error` field); see `failed`.
    pub errors: u64,
    /// When the filter was built with `BuildContext::failures_routed`: the
    /// events it failed on, as it would have kept them (marked), moved out
    /// of `batch`, and their count (also counted in `errors`). The router
    /// sends them, with their tag, to the error label (`[system]
    /// error_label`). A filter built without `failures_routed` leaves this
    /// `None` (should it not, the router puts them back in the batch).
    pub failed: Option<(Bytes, u32)>,
    /// Events over a rate limit (throttle), dropped or in `moved`: counted
    /// as the filter's `throttled_events_total`.
    pub throttled: u64,
    /// Restarts of what the filter depends on (an exec filter's program),
    /// counted in the filter's `retries_total`.
    pub retries: u64,
}

/// A filter type. Synchronous: it runs on the input's task, on a batch
/// already in memory, and must not block on I/O (the exec filter, which
/// waits for its program, does so inside `block_in_place`: filters/exec).
pub trait Filter: Send + Sync {
    /// Filters a batch of `count` events of `tag`: `parts` are runs of
    /// canonical PackedForward entries, in order.
    fn filter(&self, tag: &str, parts: &[Bytes], count: u32) -> Filtered;
}

/// A filter type: its options struct.
pub trait FilterPlugin: DeserializeOwned + JsonSchema + 'static {
    /// The `type` of its `[[filter]]` sections.
    const TYPE: &'static str;
    /// One paragraph for the configuration reference.
    const DOC: &'static str;
    /// Checks the options and prepares the filter; no I/O that changes anything.
    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError>;
}

pub type FilterRegistration = Registration<Box<dyn Filter>>;

/// The registration of the filter type `T`.
pub const fn filter<T: FilterPlugin>() -> FilterRegistration {
    fn build<'a, T: FilterPlugin>(
        s: Section<'a>,
        cx: &mut BuildContext,
    ) -> Result<Built<'a, Box<dyn Filter>>, SectionError> {
        Ok(Built::One(s.options::<T>()?.build(cx)?))
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
}
