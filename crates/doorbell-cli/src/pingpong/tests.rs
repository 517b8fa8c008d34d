//! `doorbell pingpong`'s own unit tests.
use super::*;

fn dest() -> Dest {
    let mut gid = [0u8; 16];
    gid[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 2]);
    Dest {
        lid: 0,
        qpn: 0x100,
        psn: 0xab_cdef,
        gid,
    }
}

#[test]
fn the_message_is_rdma_cores_format() {
    let w = dest().to_wire();
    assert_eq!(
        &w[..],
        b"0000:000100:abcdef:00000000000000000000ffff7f000002\0"
    );
    assert_eq!(Dest::from_wire(&w), Ok(dest()));
    assert_eq!(
        dest().to_string(),
        "LID 0x0000, QPN 0x000100, PSN 0xabcdef, GID ::ffff:127.0.0.2"
    );
}

#[test]
fn bad_messages_are_refused_not_misread() {
    for m in [
        &b""[..],
        b"0000:000100:abcdef",
        b"0000:000100:abcdef:00000000000000000000ffff7f00000",
        b"0000:000100:abcdef:00000000000000000000ffff7f00000g",
        b"0000:000100:abcdef:00000000000000000000ffff7f000002:",
        b"00000:000100:abcdef:00000000000000000000ffff7f000002",
        b"0000::abcdef:00000000000000000000ffff7f000002",
        b"0000:1000000:abcdef:00000000000000000000ffff7f00000",
        &[0xff; 52],
    ] {
        assert!(
            Dest::from_wire(m).is_err(),
            "{:?}",
            String::from_utf8_lossy(m)
        );
    }
    // Anything after the NUL is ignored, as sscanf would.
    let mut w = dest().to_wire().to_vec();
    w.extend_from_slice(b"trailing");
    assert_eq!(Dest::from_wire(&w), Ok(dest()));
}

#[test]
fn the_summary_lines_are_rc_pingpongs() {
    assert_eq!(
        summary(4096, 1000, 0.5),
        "8192000 bytes in 0.50 seconds = 131.07 Mbit/sec\n\
         1000 iters in 0.50 seconds = 500.00 usec/iter"
    );
}

#[test]
fn the_pattern_differs_between_neighbours_and_pages() {
    assert_ne!(pattern_byte(0), pattern_byte(1));
    assert_ne!(pattern_byte(0), pattern_byte(PAGE));
    assert_ne!(pattern_byte(0), FILL);
}
