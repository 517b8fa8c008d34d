//! The per-post counters of each configuration equal DESIGN.md's table:
//!
//! | configuration | MMIO writes | DMA reads (WQE) | DMA reads (payload) | DMA writes (CQE) |
//! |---|---|---|---|---|
//! | baseline | 1 | 1 | 1 | 1 |
//! | + inline | 1 | 1 | 0 | 1 |
//! | + BlueFlame (single WR) | 1 (carries WQE) | 0 | 1 | 1 |
//! | inline + BlueFlame | 1 (carries WQE) | 0 | 0 | 1 |
//! | postlist of n | 1 per n | WQEs read by DMA | 1 each | 1 each |
//! | 1 signalled in n | — | — | — | 1 per n |

use doorbell_cli::seed::{SeedConfig, SeedOptions, measure};
use doorbell_pcie::LinkConfig;
use doorbell_pcie::PerPost;

fn row(cfg: SeedConfig, o: &SeedOptions) -> PerPost {
    measure(cfg, o).unwrap().per_post
}

fn opts() -> SeedOptions {
    SeedOptions {
        posts: 256,
        ..SeedOptions::default()
    }
}

/// (MMIO writes, MMIO bytes, WQE reads, payload reads, CQE writes) per post.
fn counts(r: &PerPost) -> (f64, f64, f64, f64, f64) {
    (
        r.mmio_writes,
        r.mmio_bytes,
        r.wqe_dma_reads,
        r.payload_dma_reads,
        r.cqe_dma_writes,
    )
}

#[test]
fn baseline_inline_and_blueflame_rows() {
    let o = opts();
    // An 8-byte WRITE by pointer is ctrl + raddr + data = 48 bytes, one WQEBB;
    // inline it is ctrl + raddr + 4 + 8 padded to 16 = 48 bytes: one 64-byte
    // BlueFlame chunk either way.
    assert_eq!(
        counts(&row(SeedConfig::Baseline, &o)),
        (1.0, 8.0, 1.0, 1.0, 1.0)
    );
    assert_eq!(
        counts(&row(SeedConfig::Inline, &o)),
        (1.0, 8.0, 1.0, 0.0, 1.0)
    );
    assert_eq!(
        counts(&row(SeedConfig::BlueFlame, &o)),
        (1.0, 64.0, 0.0, 1.0, 1.0)
    );
    assert_eq!(
        counts(&row(SeedConfig::InlineBlueFlame, &o)),
        (1.0, 64.0, 0.0, 0.0, 1.0)
    );
}

#[test]
fn postlist_rings_once_and_reads_the_wqes_in_one_go() {
    let o = opts();
    let whole = measure(SeedConfig::Postlist(16), &o).unwrap();
    assert_eq!((whole.postlist_len, whole.signal_every), (Some(16), None));
    let r = whole.per_post;
    assert_eq!(counts(&r), (1.0 / 16.0, 8.0 / 16.0, 1.0 / 16.0, 1.0, 1.0));
    // 16 WQEBBs = 1024 bytes: 2 MRd of MRRS 512, 4 CplD of MPS 256, per list;
    // plus one 8-byte payload read (1 MRd, 1 CplD) per WR. The SQ is 4 KiB
    // (16 WQEs of the 256 bytes an RC WQE may take, as mlx5 sizes them)
    // and starts 64 bytes into its page, after the one-WQE receive queue,
    // as mlx5 lays them out: one list in four crosses the page and is read
    // in one more request, completed in one more CplD.
    assert_eq!(
        (r.mrd_tlps, r.cpld_tlps),
        ((2.0 + 0.25) / 16.0 + 1.0, (4.0 + 0.25) / 16.0 + 1.0)
    );
    assert_eq!(r.dma_read_bytes, 64.0 + 8.0);
}

#[test]
fn unsignaled_writes_one_cqe_per_period() {
    let o = opts();
    let whole = measure(SeedConfig::Unsignaled(16), &o).unwrap();
    assert_eq!((whole.postlist_len, whole.signal_every), (None, Some(16)));
    let r = whole.per_post;
    assert_eq!(counts(&r), (1.0, 8.0, 1.0, 1.0, 1.0 / 16.0));
    assert_eq!(r.dma_write_bytes, 64.0 / 16.0);
}

#[test]
fn tlps_follow_the_link_parameters() {
    let base = row(SeedConfig::Baseline, &opts());
    // MWr = doorbell + CQE; MRd = WQE + payload; CplD likewise.
    assert_eq!(
        (base.mwr_tlps, base.mrd_tlps, base.cpld_tlps),
        (2.0, 2.0, 2.0)
    );
    // With MPS 128 and MRRS 128 a postlist of 16 (1024 bytes) takes 8 MRd
    // and 8 CplD per list, and one more of each for the one list in four
    // that crosses a page (see the postlist test).
    let o = SeedOptions {
        link: LinkConfig {
            mps_bytes: 128,
            mrrs_bytes: 128,
            rcb_bytes: 64,
        },
        ..opts()
    };
    let r = row(SeedConfig::Postlist(16), &o);
    assert_eq!(
        (r.mrd_tlps, r.cpld_tlps),
        ((8.0 + 0.25) / 16.0 + 1.0, (8.0 + 0.25) / 16.0 + 1.0)
    );
}

#[test]
fn a_larger_message_crosses_in_more_tlps_but_as_one_read() {
    // 4096 bytes by pointer: one payload read of 8 MRd (MRRS 512) and 16 CplD.
    let o = SeedOptions {
        size: 4096,
        ..opts()
    };
    let r = row(SeedConfig::Baseline, &o);
    assert_eq!(r.payload_dma_reads, 1.0);
    assert_eq!((r.mrd_tlps, r.cpld_tlps), (1.0 + 8.0, 1.0 + 16.0));
}
