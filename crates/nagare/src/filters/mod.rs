//! Filters: steps between the router and the outputs (`[[filter]]`), applied
//! in file order, each to the batches whose tag its `match` selects, as in
//! Fluentd. Each filter type lives in its own file.
//!
//! A filter sees a whole batch (the PackedForward entries of one tag, as the
//! input made them) and answers with a new batch or "unchanged", so a filter
//! that only looks at the tag copies nothing, and one that needs fields
//! decodes the entries it touches and re-encodes them once into one buffer.
//! The router (router/mod.rs) keeps, per tag, the filters whose `match`
//! selects it: a tag without filters costs nothing extra.

use nagare_core::filter::{filter, FilterRegistration};
use nagare_core::registry;

mod common;
#[cfg(test)]
mod cost;

registry! {
    FilterRegistration;
    parser => filter::<parser::ParserFilterConfig>(),
    grep => filter::<grep::GrepConfig>(),
    modify => filter::<modify::ModifyConfig>(),
    rewrite_tag => filter::<rewrite_tag::RewriteTagConfig>(),
    throttle => filter::<throttle::ThrottleConfig>(),
    sample => filter::<sample::SampleConfig>(),
    exec => filter::<exec::ExecConfig>(),
    lua => filter::<lua::LuaConfig>(),
    docker_partial => filter::<docker_partial::DockerPartialConfig>(),
}
