//! The registry's `Range` (blob GET) and `Content-Range` (upload PATCH)
//! parsers on any header value: never a panic, and a range granted lies
//! inside the blob, as asked where the ask was a plain `start-end`.
#![no_main]

use arbitrary::Arbitrary;
use axum::http::{header, HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sealvol_registry::http::oci::blobs::byte_range;
use sealvol_registry::http::oci::uploads::chunk_start;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    size: u64,
    value: &'a [u8],
}

fuzz_target!(|input: Input| {
    let Ok(value) = HeaderValue::from_bytes(input.value) else {
        return;
    };
    let mut h = HeaderMap::new();
    h.insert(header::RANGE, value.clone());
    if let Ok(Some((start, end))) = byte_range(&h, input.size) {
        assert!(start <= end, "{value:?} of {}: {start}-{end}", input.size);
        assert!(
            end < input.size,
            "{value:?} of {}: {start}-{end}",
            input.size
        );
    }
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_RANGE, value.clone());
    if let Ok(Some(start)) = chunk_start(&h) {
        // `<start>-<end>` with digits only: the start is the first number.
        let v = value.to_str().expect("a parsed value is text");
        let v = v.strip_prefix("bytes ").unwrap_or(v);
        assert_eq!(
            v.split('-').next().and_then(|a| a.parse().ok()),
            Some(start)
        );
    }
});
