//! What several outputs share (not a plugin; scripts/check-layers.sh lets
//! every output use it): `objects`, the object-storage outputs' chunk to
//! object path (s3, azure_blob).

pub mod objects;
