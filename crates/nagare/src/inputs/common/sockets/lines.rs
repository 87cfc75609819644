//! The raw line inputs' part (`tcp`, `udp`, `unix`): the options they
//! share, checked once, and the decoder that turns each line into an event
//! through the input's parser, as `tail` does for a file's lines.

use nagare_core::plugin::OptionError;
use nagare_forward::EventTime;

use super::framing::Framing;
use super::{Batches, Decoder, Peer};
use crate::inputs::common::lines::encode_line;
use crate::parsers::{Parser, ParserConfig, ParserType};

/// Options every raw line input has, as its struct holds them.
pub(crate) struct LineOptions<'a> {
    pub tag: &'a str,
    pub parser: Option<&'a ParserConfig>,
    pub delimiter: &'a str,
    pub source_address_key: Option<&'a str>,
}

impl LineOptions<'_> {
    /// Checks the options (no I/O).
    pub(crate) fn check(&self) -> Result<(), OptionError> {
        if self.tag.trim().is_empty() {
            return Err(OptionError::new("tag", "must not be empty"));
        }
        if self.delimiter.is_empty() {
            return Err(OptionError::new(
                "delimiter",
                "must not be empty (e.g. \"\\n\")",
            ));
        }
        let parser = self.parser.cloned().unwrap_or_default();
        if parser.kind == ParserType::Multiline {
            return Err(OptionError::new(
                "parser.type",
                "\"multiline\" joins lines of a file; a network input reads one message per line",
            ));
        }
        crate::parsers::check_options("parser", &parser)
    }

    pub(crate) fn framing(&self) -> Framing {
        Framing::Lines {
            delimiter: self.delimiter.as_bytes().to_vec(),
        }
    }

    /// The decoder; the options were checked.
    pub(crate) fn decoder(&self) -> anyhow::Result<Box<dyn Decoder>> {
        Ok(Box::new(LineDecoder {
            tag: self.tag.to_string(),
            parser: Parser::new(&self.parser.cloned().unwrap_or_default())?,
            source_address_key: self.source_address_key.map(String::from),
        }))
    }
}

struct LineDecoder {
    tag: String,
    parser: Parser,
    source_address_key: Option<String>,
}

impl Decoder for LineDecoder {
    fn decode(&self, msg: &[u8], peer: &Peer, now: EventTime, out: &mut Batches) -> bool {
        let source = self
            .source_address_key
            .as_deref()
            .map(|k| (k, peer.address.as_str()));
        let mut ok = true;
        out.push(&self.tag, |buf| {
            ok = encode_line(buf, now, msg, &self.parser, source)
        });
        ok
    }
}
