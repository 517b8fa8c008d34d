//! The device's hot path takes nothing from the allocator: once warm, an
//! RDMA WRITE (by a data segment, or inline) from its doorbell through its
//! frame, the peer's ACK and the CQE allocates nothing, with the frames it
//! sent handed back as the live runtime hands them ([`Nic::recycle`]).
//! The test binary counts the allocations each thread makes.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use doorbell_layout::wqe::{InlineSeg, RaddrSeg, WQEBB_LEN, WqeOpcode, field};

use doorbell_host::HostMemory;
use doorbell_types::{HostAddr, Psn};
use doorbell_wire::{BthOpcode, BthRepr, ExtHeaders, RethRepr, RoceIp, RoceRepr, parse_roce};

use crate::{EPSN, LOCAL, PEER, Rig, SQ_PSN, ctrl, peer_ack, peer_aeth, rdma_wqe};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // During a thread's teardown the counter may be gone: not counted.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is handed to the system allocator unchanged; the
// counter is a const-initialised thread-local, which takes no memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// An inline RDMA WRITE of `len` bytes of 0x5a.
fn inline_write(rig: &Rig, index: u16, len: u32) -> [u8; WQEBB_LEN] {
    let mut w = [0u8; WQEBB_LEN];
    ctrl(&mut w, index, WqeOpcode::RdmaWrite, rig.qpn.get(), 3);
    let mut r = RaddrSeg::new_unchecked(&mut w[16..32]);
    r.set_raddr(0x7000_0000);
    r.set_rkey(0x4242);
    InlineSeg::new_unchecked(&mut w[32..]).set_byte_count(len);
    let data = 32 + field::INLINE_HDR_LEN;
    w[data..data + len as usize].fill(0x5a);
    w
}

/// Runs `n` WRITEs one after another (doorbell, frame handed back, ACK),
/// each built by `wqe`; returns the allocations the device made for the
/// last `n - warm` of them.
fn steady(n: u16, warm: u16, wqe: impl Fn(&Rig, u16) -> [u8; WQEBB_LEN]) -> u64 {
    let mut rig = Rig::new();
    let mut made = 0;
    for i in 0..n {
        let w = wqe(&rig, i);
        rig.write_sq(i, &w);
        let ack = peer_ack(&rig, SQ_PSN + u32::from(i), u32::from(i) + 1);
        let before = allocations();
        rig.ring(i, u8::from(WqeOpcode::RdmaWrite), 3);
        let f = rig.nic.poll_transmit().expect("the WRITE's frame");
        rig.nic.recycle(f.bytes);
        let now = rig.now;
        rig.nic.handle_frame(now, &ack, &mut rig.bus);
        assert!(rig.nic.poll_transmit().is_none());
        if i >= warm {
            made += allocations() - before;
        }
        assert_eq!(rig.cqes().len(), 1, "WRITE {i} completed");
    }
    made
}

#[test]
fn a_write_by_data_segment_allocates_nothing_once_warm() {
    let made = steady(64, 8, |rig, i| rdma_wqe(rig, i, WqeOpcode::RdmaWrite, 64));
    assert_eq!(made, 0, "allocations for 56 WRITEs");
}

#[test]
fn an_inline_write_allocates_nothing_once_warm() {
    let made = steady(64, 8, |rig, i| inline_write(rig, i, 8));
    assert_eq!(made, 0, "allocations for 56 WRITEs");
}

/// Hands the rig `n` requests from the peer, one after another, each
/// built by `request` (the PSN given) and answered with one ACK whose
/// buffer goes back to the NIC; returns the allocations the device made
/// for the last `n - warm`.
fn responding(n: u32, warm: u32, mut request: impl FnMut(&mut Rig, u32) -> Vec<u8>) -> u64 {
    let mut rig = Rig::new();
    let mut made = 0;
    for i in 0..n {
        let f = request(&mut rig, EPSN + i);
        let before = allocations();
        let now = rig.now;
        rig.nic.handle_frame(now, &f, &mut rig.bus);
        let ack = rig.nic.poll_transmit().expect("the ACK");
        rig.nic.recycle(ack.bytes);
        if i >= warm {
            made += allocations() - before;
        }
        assert!(rig.nic.poll_transmit().is_none());
        let _ = rig.cqes();
    }
    made
}

#[test]
fn a_write_from_the_peer_allocates_nothing_once_warm() {
    let made = responding(64, 8, |rig, psn| rig.write_only(psn, 0, &[7; 64]));
    assert_eq!(made, 0, "allocations for 56 WRITEs");
}

#[test]
fn a_send_from_the_peer_allocates_nothing_once_warm() {
    let made = responding(64, 8, |rig, psn| {
        let (lkey, addr) = (rig.mr.raw(), rig.mr_buf.get());
        rig.post_recv(lkey, addr, 256);
        rig.request(BthOpcode::RcSendOnly, psn, ExtHeaders::default(), &[7; 64])
    });
    assert_eq!(made, 0, "allocations for 56 SENDs");
}

/// A burst of WRITEs from the peer handled before any frame leaves: each
/// ACK replaces the one before it in the queue, and the buffer of the one
/// replaced carries the next, so a burst allocates no more than one ACK.
#[test]
fn acks_coalesced_in_a_burst_allocate_nothing_once_warm() {
    const BURSTS: u32 = 16;
    const PER_BURST: u32 = 8;
    let mut rig = Rig::new();
    let mut made = 0;
    let mut psn = EPSN;
    for b in 0..BURSTS {
        let frames: Vec<_> = (0..PER_BURST)
            .map(|k| rig.write_only(psn + k, 0, &[7; 64]))
            .collect();
        psn += PER_BURST;
        let before = allocations();
        for f in &frames {
            let now = rig.now;
            rig.nic.handle_frame(now, f, &mut rig.bus);
        }
        let ack = rig.nic.poll_transmit().expect("the burst's ACK");
        assert!(rig.nic.poll_transmit().is_none(), "one ACK for the burst");
        rig.nic.recycle(ack.bytes);
        if b >= 2 {
            made += allocations() - before;
        }
        let _ = rig.cqes();
    }
    assert_eq!(made, 0, "allocations for {} bursts", BURSTS - 2);
}

/// A READ from the peer of three MTUs that crosses a page: its responses
/// carry the memory's bytes, in order, and once warm the device builds
/// them without taking from the allocator (each response's data is read
/// into the buffer of its frame).
#[test]
fn a_read_from_the_peer_allocates_nothing_once_warm() {
    const OFFSET: u64 = 3000;
    const LEN: usize = 3000;
    let mut rig = Rig::new();
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 1) as u8).collect();
    rig.mem
        .write(HostAddr::new(rig.mr_buf.get() + OFFSET), &pattern)
        .unwrap();
    let mut made = 0;
    for i in 0..32 {
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: rig.mr_buf.get() + OFFSET,
                rkey: rig.mr,
                dma_len: LEN as u32,
            }),
            ..ExtHeaders::default()
        };
        // Each READ takes as many PSNs as it has responses.
        let f = rig.request(BthOpcode::RcRdmaReadRequest, EPSN + 3 * i, ext, &[]);
        let mut got = Vec::new();
        let before = allocations();
        let now = rig.now;
        rig.nic.handle_frame(now, &f, &mut rig.bus);
        let mut responses = 0;
        while let Some(r) = rig.nic.poll_transmit() {
            if i == 0 {
                let p = parse_roce(&r.bytes).expect("a well-formed response");
                got.extend_from_slice(&r.bytes[p.payload]);
            }
            responses += 1;
            rig.nic.recycle(r.bytes);
        }
        if i >= 4 {
            made += allocations() - before;
        }
        assert_eq!(responses, 3, "READ {i}: one response per MTU");
        if i == 0 {
            assert_eq!(got, pattern, "the responses carry the memory's bytes");
        }
    }
    assert_eq!(made, 0, "allocations for 28 READs");
}

/// A READ response from the peer: with an AETH (`msn`) where its opcode
/// has one.
fn peer_response(rig: &Rig, opcode: BthOpcode, psn: u32, msn: u32, payload: &[u8]) -> Vec<u8> {
    if opcode == BthOpcode::RcRdmaReadResponseMiddle {
        let repr = RoceRepr {
            ip: RoceIp::v4(PEER, LOCAL),
            src_port: 0xc000,
            bth: BthRepr::new(opcode, rig.qpn, Psn::new(psn)),
            ext: ExtHeaders::default(),
        };
        let mut f = Vec::new();
        repr.emit_to_vec(payload, &mut f).unwrap();
        f
    } else {
        peer_aeth(rig, opcode, psn, msn, payload)
    }
}

/// READs past the QP's limit of one outstanding (`max_rd_atomic`): the
/// next READ waits while the one out is answered, and the device looks at
/// it on its doorbell and on every response. Once warm, neither those looks
/// nor the READ's own turn take from the allocator.
#[test]
fn a_read_waiting_for_the_outstanding_limit_allocates_nothing_once_warm() {
    const READS: u16 = 32;
    const WARM: u16 = 4;
    const MTU: usize = 1024;
    let mut rig = Rig::new();
    let post = |rig: &mut Rig, k: u16| {
        let w = rdma_wqe(rig, k, WqeOpcode::RdmaRead, 3 * MTU as u32);
        rig.write_sq(k, &w);
        rig.ring(k, u8::from(WqeOpcode::RdmaRead), 3);
    };
    let requests = |rig: &mut Rig| {
        let mut n = 0;
        while let Some(f) = rig.nic.poll_transmit() {
            let p = parse_roce(&f.bytes).expect("a well-formed request");
            assert_eq!(p.repr.bth.opcode, BthOpcode::RcRdmaReadRequest);
            rig.nic.recycle(f.bytes);
            n += 1;
        }
        n
    };
    post(&mut rig, 0);
    assert_eq!(requests(&mut rig), 1, "the first READ goes at once");
    let mut made = 0;
    for k in 0..READS {
        let psn = SQ_PSN + 3 * u32::from(k);
        let msn = u32::from(k) + 1;
        let responses: Vec<Vec<u8>> = [
            BthOpcode::RcRdmaReadResponseFirst,
            BthOpcode::RcRdmaReadResponseMiddle,
            BthOpcode::RcRdmaReadResponseLast,
        ]
        .into_iter()
        .zip(psn..)
        .map(|(op, psn)| peer_response(&rig, op, psn, msn, &[0x5a; MTU]))
        .collect();
        let before = allocations();
        post(&mut rig, k + 1);
        assert_eq!(requests(&mut rig), 0, "READ {} waits for READ {k}", k + 1);
        for (i, f) in responses.iter().enumerate() {
            let now = rig.now;
            rig.nic.handle_frame(now, f, &mut rig.bus);
            let expect = usize::from(i == 2);
            assert_eq!(requests(&mut rig), expect, "READ {k}, response {i}");
        }
        if k >= WARM {
            made += allocations() - before;
        }
        assert_eq!(rig.cqes().len(), 1, "READ {k} completed");
    }
    assert_eq!(made, 0, "allocations for {} READs", READS - WARM);
}
