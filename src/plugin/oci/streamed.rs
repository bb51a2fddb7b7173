//! A layer checked as it streams in: its size against what the manifest says and the configured
//! maximum, refused at the first byte too many, and its sha256 computed on the way, so that
//! nothing of it needs to be held in memory to be checked. Pure: fed chunks, it says whether to go
//! on.

use super::error::OciError;
use sha2::{Digest, Sha256};

pub(super) struct LayerCheck {
    digest: String,
    declared: u64,
    limit: u64,
    received: u64,
    hash: Sha256,
}

impl LayerCheck {
    /// A layer the manifest names by `digest` and gives `declared` bytes, fetched under `limit`.
    pub fn new(digest: &str, declared: u64, limit: u64) -> LayerCheck {
        LayerCheck {
            digest: digest.to_owned(),
            declared,
            limit,
            received: 0,
            hash: Sha256::new(),
        }
    }

    /// What the answer's `Content-Length` announces: refused before any byte is read when it is
    /// more than can be accepted.
    pub fn announced(&self, length: Option<u64>) -> Result<(), OciError> {
        match length {
            Some(length) => self.within(length),
            None => Ok(()),
        }
    }

    fn within(&self, size: u64) -> Result<(), OciError> {
        if size > self.limit {
            Err(OciError::TooLarge {
                size,
                limit: self.limit,
            })
        } else if size > self.declared {
            Err(OciError::LayerSizeMismatch {
                declared: self.declared,
                received: format!("more than {}", self.declared),
            })
        } else {
            Ok(())
        }
    }

    /// The next chunk: refused as soon as the bytes so far are more than the manifest says or
    /// the maximum allows.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), OciError> {
        let received = self.received.saturating_add(chunk.len() as u64);
        self.within(received)?;
        self.received = received;
        self.hash.update(chunk);
        Ok(())
    }

    /// The end of the stream: as many bytes as the manifest says, hashing to its digest.
    pub fn finish(self) -> Result<(), OciError> {
        if self.received != self.declared {
            return Err(OciError::LayerSizeMismatch {
                declared: self.declared,
                received: self.received.to_string(),
            });
        }
        let actual = self
            .hash
            .finalize()
            .iter()
            .fold(String::from("sha256:"), |mut out, b| {
                out.push_str(&format!("{b:02x}"));
                out
            });
        if actual != self.digest {
            return Err(OciError::DigestMismatch {
                expected: self.digest,
                actual,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::hash::digest_bytes;

    #[test]
    fn layers_are_checked_as_they_come() {
        let layer = b"the component's bytes".as_slice();
        let digest = digest_bytes(layer);
        let size = layer.len() as u64;
        let whole = |check: &mut LayerCheck, bytes: &[u8]| -> Result<(), OciError> {
            for chunk in bytes.chunks(4) {
                check.feed(chunk)?;
            }
            Ok(())
        };
        // (what is sent, declared size, limit, the reason it stops with: None for accepted)
        let cases: [(&[u8], u64, u64, Option<&str>); 6] = [
            (layer, size, 100, None),
            (b"other bytes, same length", 24, 100, Some("DigestMismatch")),
            (layer, size - 1, 100, Some("ArtifactSizeMismatch")),
            (&layer[..4], size, 100, Some("ArtifactSizeMismatch")),
            (layer, size, size - 1, Some("ArtifactTooLarge")),
            (&[], size, 100, Some("ArtifactSizeMismatch")),
        ];
        for (sent, declared, limit, stops) in cases {
            let mut check = LayerCheck::new(&digest, declared, limit);
            let result = whole(&mut check, sent).and_then(|()| check.finish());
            assert_eq!(
                result.err().map(|e| e.reason()),
                stops,
                "{sent:?} {declared} {limit}"
            );
        }
    }

    #[test]
    fn a_stream_is_refused_at_the_first_byte_too_many() {
        let mut check = LayerCheck::new(&digest_bytes(b"x"), 10, 20);
        check.feed(&[0; 10]).unwrap();
        let refused = check.feed(&[0]).unwrap_err();
        assert_eq!(refused.reason(), "ArtifactSizeMismatch");
        assert!(refused.to_string().contains("more than 10"), "{refused}");
        let check = LayerCheck::new(&digest_bytes(b"x"), 10, 20);
        assert!(check.announced(None).is_ok() && check.announced(Some(10)).is_ok());
        assert_eq!(
            check.announced(Some(11)).unwrap_err().reason(),
            "ArtifactSizeMismatch"
        );
        assert_eq!(
            check.announced(Some(1 << 40)).unwrap_err().reason(),
            "ArtifactTooLarge"
        );
    }
}
