//! Any bytes from the network, under every protection: the decoder never
//! panics, and what it accepts is exactly what the encoder makes of the
//! header and payload it returned (so a damaged datagram never passes).
#![no_main]

use ipmc::protocol::datagram::{decode, encode, header, Auth, Key, Protection, KEY_LEN};
use libfuzzer_sys::fuzz_target;

const KEY: Key = Key([0x5a; KEY_LEN]);

fuzz_target!(|bytes: &[u8]| {
    let _ = header(bytes);
    for auth in [
        Auth::crc(false),
        Auth::crc(true),
        Auth::Tag(KEY),
        Auth::Polyval(KEY),
        Auth::Encrypt(KEY),
    ] {
        let prot = Protection::new(auth);
        let mut copy = bytes.to_vec();
        if let Ok(d) = decode(&mut copy, &prot) {
            let (h, payload) = (d.header, d.payload.to_vec());
            let mut again = Vec::new();
            encode(&h, &payload, &prot, &mut again);
            if matches!(auth, Auth::Encrypt(_)) {
                // Encrypted: the encoder's output decodes to the same.
                let d2 = decode(&mut again, &prot).expect("own datagram decodes");
                assert_eq!((d2.header, d2.payload), (h, &payload[..]));
            } else {
                assert_eq!(again, bytes, "{auth:?} accepted what it would not encode");
            }
        }
    }
});
