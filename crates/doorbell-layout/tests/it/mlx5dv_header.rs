//! doorbell-layout against rdma-core's public header `infiniband/mlx5dv.h`.
//!
//! Each test generates a C program (see [`crate::c_probe`]) that prints sizes,
//! `offsetof`s, enum constants and the bytes that the header's own inline
//! helpers (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`,
//! `mlx5dv_set_dgram_seg`, `mlx5dv_get_cqe_*`) produce or decode, and compares
//! them with our constants, setters and getters. All mismatches of a test are
//! reported together.
//!
//! Byte comparisons start both sides from a buffer filled with `0xa5`
//! (STYLE R15), so a field that one side writes and the other leaves alone
//! shows up.
//!
//! Not in the public header, so checked in [`crate::reference_doc`] instead:
//! MLX5_ADAPTER_PAGE_SIZE, MLX5_BF_OFFSET, the bfreg counts, the EQ doorbell
//! offset, MLX5_CQ_SET_CI / MLX5_CQ_ARM_DB, the DS unit and 6-bit DS mask, the
//! CE / FM masks, the CQE `flags_rqpn` and `sop_drop_qpn` bit splits and the
//! CQE init value. Where a C expression below splits such a word, it follows
//! the reference document and says so. `wqe::AV_GRH_FLAG` (bit 30 of
//! `grh_gid_fl`) is in neither and is not checked.

use std::fmt::{Debug, Display};
use std::ops::Range;

use doorbell_layout::cqe::{self, Cqe64, CqeOpcode, Syndrome};
use doorbell_layout::dbr::{self, CqDoorbellRecord, QpDoorbellRecord};
use doorbell_layout::uar::{self, CqArmDoorbell, SendDoorbell, UarRegister};
use doorbell_layout::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, WqeOpcode, ctrl_flags,
};
use doorbell_types::Mkey;

use crate::c_probe::{HEADER, Print, Printed, Probe, c_array};

// ---------------------------------------------------------------------------
// Harness: expectations next to the C that prints the header's side.

/// Integers on our side of a comparison.
trait Ours: Copy {
    fn to_u64(self) -> u64;
}

macro_rules! ours_as_u64 {
    ($($t:ty),*) => { $(impl Ours for $t { fn to_u64(self) -> u64 { self as u64 } })* };
}
ours_as_u64!(u8, u16, u32, u64, usize);

/// Collects every mismatch of one test, then fails once with all of them.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
}

impl Report {
    /// `got` (what doorbell-layout says) must equal `want` (what the header says).
    fn eq<T: PartialEq + Debug>(&mut self, what: impl Display, want: T, got: T) {
        if want != got {
            self.failures.push(format!(
                "{what}: header side {want:x?}, doorbell-layout {got:x?}"
            ));
        }
    }

    /// As [`Report::eq`], for integers the C program printed.
    fn eq_num(&mut self, what: impl Display, want: u64, got: u64) {
        if want != got {
            self.failures.push(format!(
                "{what}: header side {want:#x}, doorbell-layout {got:#x}"
            ));
        }
    }

    fn finish(self, printed: &Printed) {
        assert!(
            self.failures.is_empty(),
            "{} mismatch(es) between doorbell-layout and <{HEADER}>, numbers in hex \
             (generated C program: {}):\n  {}",
            self.failures.len(),
            printed.source().display(),
            self.failures.join("\n  ")
        );
    }
}

enum Expect {
    Num(u64),
    Bytes(Vec<u8>),
}

/// A probe plus what we expect it to print.
struct Checks {
    probe: Probe,
    /// Names and C expressions of the integers `num` has asked for.
    printed_nums: Vec<(String, String)>,
    expect: Vec<(String, String, Expect)>,
}

impl Checks {
    fn new() -> Self {
        Self {
            probe: crate::c_probe::probe(),
            printed_nums: Vec::new(),
            expect: Vec::new(),
        }
    }

    /// The C integer expression `c_expr` must equal `ours` (described by
    /// `label`). Several of ours may be compared with one `name`.
    fn num(&mut self, name: &str, c_expr: &str, label: impl Into<String>, ours: impl Ours) {
        match self.printed_nums.iter().find(|(n, _)| n == name) {
            Some((_, e)) => assert_eq!(e, c_expr, "probe name {name:?} reused"),
            None => {
                self.probe.num(name, c_expr);
                self.printed_nums.push((name.to_owned(), c_expr.to_owned()));
            }
        }
        self.expect_num(name, label, ours);
    }

    /// The header constant `c_name` must equal `ours`.
    fn constant(&mut self, c_name: &str, label: impl Into<String>, ours: impl Ours) {
        self.num(c_name, c_name, label, ours);
    }

    /// `offsetof` and `sizeof` of `c_type.member` must equal the range `ours`.
    fn field(&mut self, c_type: &str, member: &str, label: &str, ours: Range<usize>) {
        let short = c_type.trim_start_matches("struct ");
        self.num(
            &format!("{short}.{member}.offset"),
            &format!("offsetof({c_type}, {member})"),
            format!("{label}.start"),
            ours.start,
        );
        self.num(
            &format!("{short}.{member}.size"),
            &format!("sizeof((({c_type} *)0)->{member})"),
            format!("{label}.len()"),
            ours.len(),
        );
    }

    /// `sizeof(c_type)` must equal `ours`.
    fn size(&mut self, c_type: &str, label: &str, ours: usize) {
        let short = c_type.trim_start_matches("struct ");
        self.num(
            &format!("sizeof.{short}"),
            &format!("sizeof({c_type})"),
            label,
            ours,
        );
    }

    fn expect_num(&mut self, name: &str, label: impl Into<String>, ours: impl Ours) {
        self.expect
            .push((name.to_owned(), label.into(), Expect::Num(ours.to_u64())));
    }

    fn expect_bytes(&mut self, name: &str, label: impl Into<String>, ours: &[u8]) {
        self.expect
            .push((name.to_owned(), label.into(), Expect::Bytes(ours.to_vec())));
    }

    /// Compiles and runs the probe and compares what it printed with the
    /// expectations. The caller may add more checks to the report.
    fn run(self, tag: &str) -> (Printed, Report) {
        let printed = self.probe.run(tag);
        let mut report = Report::default();
        for (name, label, expect) in &self.expect {
            match expect {
                Expect::Num(ours) => {
                    report.eq_num(format!("{name} vs {label}"), printed.num(name), *ours);
                }
                Expect::Bytes(ours) => {
                    let theirs = printed.bytes(name);
                    if theirs != ours.as_slice() {
                        report.failures.push(format!(
                            "{name}: bytes differ from {label}\n    header: {}\n    ours:   {}\n    at:     {}",
                            hex(theirs),
                            hex(ours),
                            diff_marks(theirs, ours)
                        ));
                    }
                }
            }
        }
        (printed, report)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn diff_marks(a: &[u8], b: &[u8]) -> String {
    (0..a.len().max(b.len()))
        .map(|i| if a.get(i) == b.get(i) { "  " } else { "^^" })
        .collect()
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

/// Every named variant of a code-point enum, found by decoding all 256 raw
/// values, with its header name. `name` matches exhaustively, so a new variant
/// does not compile until it is given its header name here.
fn named<T: From<u8> + Copy>(name: fn(T) -> Option<&'static str>) -> Vec<(T, &'static str)> {
    (0..=u8::MAX)
        .map(T::from)
        .filter_map(|v| name(v).map(|n| (v, n)))
        .collect()
}

fn wqe_opcode_name(op: WqeOpcode) -> Option<&'static str> {
    Some(match op {
        WqeOpcode::Nop => "MLX5_OPCODE_NOP",
        WqeOpcode::SendInval => "MLX5_OPCODE_SEND_INVAL",
        WqeOpcode::RdmaWrite => "MLX5_OPCODE_RDMA_WRITE",
        WqeOpcode::RdmaWriteImm => "MLX5_OPCODE_RDMA_WRITE_IMM",
        WqeOpcode::Send => "MLX5_OPCODE_SEND",
        WqeOpcode::SendImm => "MLX5_OPCODE_SEND_IMM",
        WqeOpcode::RdmaRead => "MLX5_OPCODE_RDMA_READ",
        WqeOpcode::AtomicCs => "MLX5_OPCODE_ATOMIC_CS",
        WqeOpcode::AtomicFa => "MLX5_OPCODE_ATOMIC_FA",
        WqeOpcode::Unknown(_) => return None,
    })
}

fn cqe_opcode_name(op: CqeOpcode) -> Option<&'static str> {
    Some(match op {
        CqeOpcode::Req => "MLX5_CQE_REQ",
        CqeOpcode::RespWrImm => "MLX5_CQE_RESP_WR_IMM",
        CqeOpcode::RespSend => "MLX5_CQE_RESP_SEND",
        CqeOpcode::RespSendImm => "MLX5_CQE_RESP_SEND_IMM",
        CqeOpcode::RespSendInv => "MLX5_CQE_RESP_SEND_INV",
        CqeOpcode::ResizeCq => "MLX5_CQE_RESIZE_CQ",
        CqeOpcode::NoPacket => "MLX5_CQE_NO_PACKET",
        CqeOpcode::SigErr => "MLX5_CQE_SIG_ERR",
        CqeOpcode::ReqErr => "MLX5_CQE_REQ_ERR",
        CqeOpcode::RespErr => "MLX5_CQE_RESP_ERR",
        CqeOpcode::Invalid => "MLX5_CQE_INVALID",
        CqeOpcode::Unknown(_) => return None,
    })
}

fn syndrome_name(s: Syndrome) -> Option<&'static str> {
    Some(match s {
        Syndrome::LocalLengthErr => "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
        Syndrome::LocalQpOpErr => "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR",
        Syndrome::LocalProtErr => "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR",
        Syndrome::WrFlushErr => "MLX5_CQE_SYNDROME_WR_FLUSH_ERR",
        Syndrome::MwBindErr => "MLX5_CQE_SYNDROME_MW_BIND_ERR",
        Syndrome::BadRespErr => "MLX5_CQE_SYNDROME_BAD_RESP_ERR",
        Syndrome::LocalAccessErr => "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR",
        Syndrome::RemoteInvalReqErr => "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR",
        Syndrome::RemoteAccessErr => "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR",
        Syndrome::RemoteOpErr => "MLX5_CQE_SYNDROME_REMOTE_OP_ERR",
        Syndrome::TransportRetryExcErr => "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
        Syndrome::RnrRetryExcErr => "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR",
        Syndrome::RemoteAbortedErr => "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR",
        Syndrome::Unknown(_) => return None,
    })
}

/// `Field`s that are a single byte offset become a one-byte range.
fn byte(at: usize) -> Range<usize> {
    at..at + 1
}

// ---------------------------------------------------------------------------
// Constants and code points.

#[test]
fn constants_match_header() {
    let mut c = Checks::new();
    macro_rules! constant {
        ($c_name:literal, $ours:expr) => {
            c.constant($c_name, stringify!($ours), $ours)
        };
    }
    constant!("MLX5_SEND_WQE_BB", wqe::WQEBB_LEN);
    constant!("MLX5_SEND_WQE_SHIFT", wqe::WQEBB_SHIFT);
    constant!("MLX5_INLINE_SEG", wqe::INLINE_SEG_FLAG);
    constant!("MLX5_EXTENDED_UD_AV", wqe::EXTENDED_UD_AV);
    constant!("MLX5_INVALID_LKEY", Mkey::INVALID.raw());
    constant!("MLX5_WQE_CTRL_CQ_UPDATE", ctrl_flags::CQ_UPDATE);
    constant!("MLX5_WQE_CTRL_SOLICITED", ctrl_flags::SOLICITED);
    constant!("MLX5_WQE_CTRL_FENCE", ctrl_flags::FENCE);
    constant!(
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE",
        ctrl_flags::INITIATOR_SMALL_FENCE
    );
    constant!("MLX5_CQE_OWNER_MASK", cqe::OWNER_MASK);
    constant!("MLX5_RCV_DBR", dbr::RCV_DBR);
    constant!("MLX5_SND_DBR", dbr::SND_DBR);
    constant!("MLX5_CQ_DOORBELL", uar::CQ_DOORBELL);
    constant!("MLX5_CQ_DB_REQ_NOT", uar::CQ_DB_REQ_NOT);
    constant!("MLX5_CQ_DB_REQ_NOT_SOL", uar::CQ_DB_REQ_NOT_SOL);
    // The provider initialises every CQE's op_own to opcode INVALID, owner 0
    // (reference §8.1); the header supplies the opcode.
    c.num(
        "op_own_init",
        "MLX5_CQE_INVALID << 4",
        "cqe::OP_OWN_INIT",
        cqe::OP_OWN_INIT,
    );

    let (printed, mut report) = c.run("constants");
    report.eq(
        "uar::decode_offset(MLX5_CQ_DOORBELL)",
        UarRegister::CqArm,
        uar::decode_offset(printed.num("MLX5_CQ_DOORBELL") as usize, uar::BF_REG_SIZE),
    );
    report.finish(&printed);
}

#[test]
fn every_opcode_and_syndrome_matches_header() {
    let mut c = Checks::new();
    for (op, name) in named(wqe_opcode_name) {
        c.constant(name, format!("WqeOpcode::{op:?}"), u8::from(op));
    }
    for (op, name) in named(cqe_opcode_name) {
        c.constant(name, format!("CqeOpcode::{op:?}"), u8::from(op));
    }
    for (s, name) in named(syndrome_name) {
        c.constant(name, format!("Syndrome::{s:?}"), u8::from(s));
    }
    let (printed, report) = c.run("code_points");
    report.finish(&printed);
}

// ---------------------------------------------------------------------------
// Struct layouts.

#[test]
fn struct_layouts_match_header() {
    use doorbell_layout::cqe::field as cf;
    use doorbell_layout::dbr::field as df;
    use doorbell_layout::wqe::field as wf;

    let mut c = Checks::new();
    macro_rules! field {
        ($ty:literal, $member:literal, $ours:expr) => {
            c.field($ty, $member, stringify!($ours), $ours)
        };
    }
    macro_rules! size {
        ($ty:literal, $ours:expr) => {
            c.size($ty, stringify!($ours), $ours)
        };
    }

    size!("struct mlx5_wqe_ctrl_seg", wf::CTRL_LEN);
    size!("struct mlx5_wqe_ctrl_seg", CtrlSeg::<&[u8]>::LEN);
    field!(
        "struct mlx5_wqe_ctrl_seg",
        "opmod_idx_opcode",
        wf::OPMOD_IDX_OPCODE
    );
    field!("struct mlx5_wqe_ctrl_seg", "qpn_ds", wf::QPN_DS);
    field!("struct mlx5_wqe_ctrl_seg", "signature", byte(wf::SIGNATURE));
    field!(
        "struct mlx5_wqe_ctrl_seg",
        "dci_stream_channel_id",
        wf::DCI_STREAM
    );
    field!("struct mlx5_wqe_ctrl_seg", "fm_ce_se", byte(wf::FM_CE_SE));
    field!("struct mlx5_wqe_ctrl_seg", "imm", wf::IMM);

    size!("struct mlx5_wqe_raddr_seg", wf::RADDR_LEN);
    size!("struct mlx5_wqe_raddr_seg", RaddrSeg::<&[u8]>::LEN);
    field!("struct mlx5_wqe_raddr_seg", "raddr", wf::RADDR);
    field!("struct mlx5_wqe_raddr_seg", "rkey", wf::RKEY);
    field!("struct mlx5_wqe_raddr_seg", "reserved", wf::RADDR_RSVD);

    size!("struct mlx5_wqe_data_seg", wf::DATA_LEN);
    size!("struct mlx5_wqe_data_seg", DataSeg::<&[u8]>::LEN);
    field!("struct mlx5_wqe_data_seg", "byte_count", wf::BYTE_COUNT);
    field!("struct mlx5_wqe_data_seg", "lkey", wf::LKEY);
    field!("struct mlx5_wqe_data_seg", "addr", wf::ADDR);

    size!("struct mlx5_wqe_srq_next_seg", wf::SRQ_NEXT_LEN);
    size!(
        "struct mlx5_wqe_srq_next_seg",
        wqe::SrqNextSeg::<&[u8]>::LEN
    );
    field!("struct mlx5_wqe_srq_next_seg", "rsvd0", wf::SRQ_NEXT_RSVD0);
    field!(
        "struct mlx5_wqe_srq_next_seg",
        "next_wqe_index",
        wf::SRQ_NEXT_WQE_INDEX
    );

    size!("struct mlx5_wqe_inl_data_seg", wf::INLINE_HDR_LEN);
    size!("struct mlx5_wqe_inl_data_seg", InlineSeg::<&[u8]>::LEN);
    field!(
        "struct mlx5_wqe_inl_data_seg",
        "byte_count",
        wf::INLINE_BYTE_COUNT
    );

    size!("struct mlx5_wqe_atomic_seg", wf::ATOMIC_LEN);
    size!("struct mlx5_wqe_atomic_seg", AtomicSeg::<&[u8]>::LEN);
    field!("struct mlx5_wqe_atomic_seg", "swap_add", wf::SWAP_ADD);
    field!("struct mlx5_wqe_atomic_seg", "compare", wf::COMPARE);

    size!("struct mlx5_wqe_umr_ctrl_seg", wf::UMR_CTRL_LEN);
    size!("struct mlx5_wqe_mkey_context_seg", wf::MKEY_CONTEXT_LEN);
    size!("struct mlx5_wqe_umr_klm_seg", wf::UMR_KLM_LEN);

    size!("struct mlx5_wqe_av", wf::AV_LEN);
    size!("struct mlx5_wqe_datagram_seg", wf::AV_LEN);
    size!("struct mlx5_wqe_datagram_seg", DatagramSeg::<&[u8]>::LEN);
    field!("struct mlx5_wqe_av", "key.qkey.qkey", wf::AV_QKEY);
    field!("struct mlx5_wqe_av", "dqp_dct", wf::AV_DQP);
    field!(
        "struct mlx5_wqe_av",
        "stat_rate_sl",
        byte(wf::AV_STAT_RATE_SL)
    );
    field!("struct mlx5_wqe_av", "fl_mlid", byte(wf::AV_FL_MLID));
    field!("struct mlx5_wqe_av", "rlid", wf::AV_RLID);
    field!("struct mlx5_wqe_av", "rmac", wf::AV_RMAC);
    field!("struct mlx5_wqe_av", "tclass", byte(wf::AV_TCLASS));
    field!("struct mlx5_wqe_av", "hop_limit", byte(wf::AV_HOP_LIMIT));
    field!("struct mlx5_wqe_av", "grh_gid_fl", wf::AV_GRH_GID_FL);
    field!("struct mlx5_wqe_av", "rgid", wf::AV_RGID);

    size!("struct mlx5_cqe64", cqe::CQE_LEN);
    size!("struct mlx5_cqe64", Cqe64::<&[u8]>::LEN);
    field!("struct mlx5_cqe64", "flags_rqpn", cf::FLAGS_RQPN);
    field!("struct mlx5_cqe64", "srqn_uidx", cf::SRQN_UIDX);
    field!("struct mlx5_cqe64", "imm_inval_pkey", cf::IMM_INVAL_PKEY);
    field!("struct mlx5_cqe64", "byte_cnt", cf::BYTE_CNT);
    field!("struct mlx5_cqe64", "timestamp", cf::TIMESTAMP);
    field!("struct mlx5_cqe64", "sop_drop_qpn", cf::SOP_DROP_QPN);
    field!("struct mlx5_cqe64", "wqe_counter", cf::WQE_COUNTER);
    field!("struct mlx5_cqe64", "signature", byte(cf::SIGNATURE));
    field!("struct mlx5_cqe64", "op_own", byte(cf::OP_OWN));

    size!("struct mlx5_err_cqe", cqe::CQE_LEN);
    field!("struct mlx5_err_cqe", "srqn", cf::SRQN_UIDX);
    field!(
        "struct mlx5_err_cqe",
        "vendor_err_synd",
        byte(cf::VENDOR_ERR_SYND)
    );
    field!("struct mlx5_err_cqe", "syndrome", byte(cf::SYNDROME));
    field!("struct mlx5_err_cqe", "s_wqe_opcode_qpn", cf::SOP_DROP_QPN);
    field!("struct mlx5_err_cqe", "wqe_counter", cf::WQE_COUNTER);
    field!("struct mlx5_err_cqe", "signature", byte(cf::SIGNATURE));
    field!("struct mlx5_err_cqe", "op_own", byte(cf::OP_OWN));

    // A doorbell record is the `__be32 *dbrec` of struct mlx5dv_qp / mlx5dv_cq,
    // indexed by MLX5_RCV_DBR / MLX5_SND_DBR.
    let word = "sizeof(*((struct mlx5dv_qp *)0)->dbrec)";
    c.num(
        "dbrec.word.size",
        word,
        "dbr::field::WORD0.len()",
        df::WORD0.len(),
    );
    c.num(
        "dbrec.cq_word.size",
        "sizeof(*((struct mlx5dv_cq *)0)->dbrec)",
        "dbr::field::WORD1.len()",
        df::WORD1.len(),
    );
    c.num(
        "dbrec.rcv.offset",
        &format!("MLX5_RCV_DBR * {word}"),
        "dbr::field::WORD0.start",
        df::WORD0.start,
    );
    c.num(
        "dbrec.snd.offset",
        &format!("MLX5_SND_DBR * {word}"),
        "dbr::field::WORD1.start",
        df::WORD1.start,
    );
    c.num(
        "dbrec.qp.size",
        &format!("(MLX5_SND_DBR + 1) * {word}"),
        "dbr::DBR_LEN",
        dbr::DBR_LEN,
    );
    c.num(
        "dbrec.qp.size",
        &format!("(MLX5_SND_DBR + 1) * {word}"),
        "QpDoorbellRecord::LEN",
        QpDoorbellRecord::<&[u8]>::LEN,
    );

    let (printed, report) = c.run("layouts");
    report.finish(&printed);
}

// ---------------------------------------------------------------------------
// Bit packing: the header's inline setters against ours.

struct CtrlArgs {
    pi: u16,
    opcode: WqeOpcode,
    opmod: u8,
    qpn: u32,
    /// C expression (header flag names) and our value.
    fm_ce_se: (&'static str, u8),
    ds: u8,
    signature: u8,
    imm: u32,
}

fn ctrl_cases() -> Vec<CtrlArgs> {
    use ctrl_flags::*;
    let flags: [(&str, u8); 5] = [
        ("0", 0),
        ("MLX5_WQE_CTRL_CQ_UPDATE", CQ_UPDATE),
        (
            "MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED",
            CQ_UPDATE | SOLICITED,
        ),
        (
            "MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE",
            FENCE | CQ_UPDATE,
        ),
        (
            "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE | MLX5_WQE_CTRL_SOLICITED",
            INITIATOR_SMALL_FENCE | SOLICITED,
        ),
    ];
    let mut cases: Vec<CtrlArgs> = named(wqe_opcode_name)
        .into_iter()
        .enumerate()
        .map(|(i, (opcode, _))| {
            let i32 = i as u32;
            CtrlArgs {
                pi: 0x1234u16.wrapping_add(0x1111u16.wrapping_mul(i as u16)),
                opcode,
                opmod: 0,
                qpn: (0x00ab_cdef ^ (i32 << 4)) & 0x00ff_ffff,
                fm_ce_se: flags[i % flags.len()],
                ds: (i as u8 * 7) % 63 + 1,
                signature: i as u8 * 0x11,
                imm: 0x0102_0304u32.wrapping_mul(i32 + 1),
            }
        })
        .collect();
    // Every field at its widest, and every field zero.
    cases.push(CtrlArgs {
        pi: u16::MAX,
        opcode: WqeOpcode::AtomicFa,
        opmod: u8::MAX,
        qpn: 0x00ff_ffff,
        fm_ce_se: ("0xff", 0xff),
        ds: wqe::MAX_DS,
        signature: u8::MAX,
        imm: u32::MAX,
    });
    cases.push(CtrlArgs {
        pi: 0,
        opcode: WqeOpcode::Nop,
        opmod: 0,
        qpn: 0,
        fm_ce_se: ("0", 0),
        ds: 0,
        signature: 0,
        imm: 0,
    });
    cases
}

#[test]
fn ctrl_seg_matches_mlx5dv_set_ctrl_seg() {
    let cases = ctrl_cases();
    let mut c = Checks::new();
    for (i, a) in cases.iter().enumerate() {
        let name = format!("ctrl[{i}]");
        let opcode = wqe_opcode_name(a.opcode).expect("named opcode");
        // mlx5dv_set_ctrl_seg stores `imm` as given: the caller passes it in
        // network order (reference §5.3), which our set_imm produces from the
        // host value.
        let setup = format!(
            "struct mlx5_wqe_ctrl_seg s;
             memset(&s, 0xa5, sizeof s);
             mlx5dv_set_ctrl_seg(&s, {:#x}, {opcode}, {:#x}, {:#x}U, {}, {}, {:#x}, htobe32({:#x}U));",
            a.pi, a.opmod, a.qpn, a.fm_ce_se.0, a.ds, a.signature, a.imm
        );
        c.probe.block(&setup, &[Print::bytes(&name, "s")]);

        // Our setters; the header's helper leaves dci_stream_channel_id alone,
        // so we do not call set_dci_stream either.
        let mut ours = [0xa5u8; 16];
        let mut s = CtrlSeg::new_unchecked(&mut ours[..]);
        s.set_opmod_idx_opcode(a.opmod, a.pi, a.opcode);
        s.set_qpn_ds(a.qpn, a.ds);
        s.set_signature(a.signature);
        s.set_fm_ce_se(a.fm_ce_se.1);
        s.set_imm(a.imm);
        c.expect_bytes(&name, "CtrlSeg setters", &ours);
    }

    let (printed, mut r) = c.run("ctrl_seg");
    for (i, a) in cases.iter().enumerate() {
        let name = format!("ctrl[{i}]");
        let theirs = printed.bytes(&name);
        let Ok(g) = CtrlSeg::new_checked(theirs) else {
            r.failures.push(format!("{name}: {} bytes", theirs.len()));
            continue;
        };
        r.eq(format!("{name} CtrlSeg::opmod"), a.opmod, g.opmod());
        r.eq(format!("{name} CtrlSeg::wqe_index"), a.pi, g.wqe_index());
        r.eq(format!("{name} CtrlSeg::opcode"), a.opcode, g.opcode());
        r.eq(format!("{name} CtrlSeg::qpn"), a.qpn, g.qpn());
        r.eq(format!("{name} CtrlSeg::ds"), a.ds, g.ds());
        r.eq(
            format!("{name} CtrlSeg::signature"),
            a.signature,
            g.signature(),
        );
        r.eq(
            format!("{name} CtrlSeg::fm_ce_se"),
            a.fm_ce_se.1,
            g.fm_ce_se(),
        );
        r.eq(format!("{name} CtrlSeg::imm"), a.imm, g.imm());
        let f = a.fm_ce_se.1;
        if f != 0xff {
            // Flags built only from the header's names.
            r.eq(
                format!("{name} CtrlSeg::is_signaled"),
                f & ctrl_flags::CQ_UPDATE != 0,
                g.is_signaled(),
            );
            r.eq(
                format!("{name} CtrlSeg::is_solicited"),
                f & ctrl_flags::SOLICITED != 0,
                g.is_solicited(),
            );
        }

        // The send doorbell is the first 8 bytes of the last ctrl segment
        // (reference §6.1). SendDoorbell has no opmod, so it emits zero there.
        let prefix: [u8; 8] = theirs[..8].try_into().unwrap();
        let want = SendDoorbell {
            wqe_index: a.pi,
            opcode: u8::from(a.opcode),
            qpn: a.qpn,
            ds: a.ds,
        };
        r.eq(
            format!("{name} SendDoorbell::parse"),
            want,
            SendDoorbell::parse(&prefix),
        );
        if a.opmod == 0 {
            r.eq(format!("{name} SendDoorbell::emit"), prefix, want.emit());
        }
    }
    r.finish(&printed);
}

#[test]
fn data_seg_matches_mlx5dv_set_data_seg() {
    // (byte_count, lkey as C expression, lkey, addr)
    let cases: [(u32, String, u32, u64); 5] = [
        // The receive-queue terminator entry.
        (0, "MLX5_INVALID_LKEY".into(), Mkey::INVALID.raw(), 0),
        (4096, "0x12345678U".into(), 0x1234_5678, 0x7f12_3456_7000),
        (u32::MAX, "0xffffffffU".into(), u32::MAX, u64::MAX),
        (1, "0".into(), 0, 1),
        (
            0x8000_003c,
            "0xdeadbeefU".into(),
            0xdead_beef,
            0x0102_0304_0506_0708,
        ),
    ];
    let mut c = Checks::new();
    for (i, (len, lkey_c, lkey, addr)) in cases.iter().enumerate() {
        let name = format!("data[{i}]");
        let setup = format!(
            "struct mlx5_wqe_data_seg s;
             memset(&s, 0xa5, sizeof s);
             mlx5dv_set_data_seg(&s, {len:#x}U, {lkey_c}, (uintptr_t){addr:#x}ULL);"
        );
        c.probe.block(&setup, &[Print::bytes(&name, "s")]);
        let mut ours = [0xa5u8; 16];
        let mut s = DataSeg::new_unchecked(&mut ours[..]);
        s.set_byte_count(*len);
        s.set_lkey(*lkey);
        s.set_addr(*addr);
        c.expect_bytes(&name, "DataSeg setters", &ours);
    }
    let (printed, mut r) = c.run("data_seg");
    for (i, (len, _, lkey, addr)) in cases.iter().enumerate() {
        let name = format!("data[{i}]");
        let g = DataSeg::new_checked(printed.bytes(&name)).expect("16 bytes");
        r.eq(format!("{name} DataSeg::byte_count"), *len, g.byte_count());
        r.eq(format!("{name} DataSeg::lkey"), *lkey, g.lkey());
        r.eq(format!("{name} DataSeg::addr"), *addr, g.addr());
    }
    r.finish(&printed);
}

struct Dgram {
    qkey: u32,
    dqpn: u32,
    sl: u8,
    rlid: u16,
    rmac: [u8; 6],
    tclass: u8,
    hop_limit: u8,
    grh_gid_fl: u32,
    rgid: [u8; 16],
}

/// Bytes of the address vector that `DatagramSeg` has no setter for (none
/// now: `set_qkey` clears the reserved half of the key and `set_fl_mlid`
/// exists). Kept so that a future field without a setter is listed here.
const DGRAM_NOT_WRITTEN: [usize; 0] = [];

#[test]
fn datagram_seg_matches_mlx5dv_set_dgram_seg() {
    let cases = [
        Dgram {
            qkey: 0x1111_1111,
            dqpn: 0x00ab_cdef,
            sl: 3,
            rlid: 0xffff,
            rmac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
            tclass: 0x68,
            hop_limit: 64,
            grh_gid_fl: wqe::AV_GRH_FLAG | (3 << 20) | 0x12345,
            rgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1],
        },
        Dgram {
            qkey: u32::MAX,
            dqpn: 0x00ff_ffff,
            sl: 0x0f,
            rlid: 0,
            rmac: [0xff; 6],
            tclass: 0xff,
            hop_limit: 0xff,
            grh_gid_fl: u32::MAX,
            rgid: core::array::from_fn(|i| 0xf0 | i as u8),
        },
    ];
    let mut c = Checks::new();
    for (i, d) in cases.iter().enumerate() {
        let name = format!("dgram[{i}]");
        // UD: the Q_Key is the high half of the 64-bit key; ext = 1 sets
        // MLX5_EXTENDED_UD_AV; stat_rate_sl carries only the SL (rate 0).
        let setup = format!(
            "struct mlx5_wqe_datagram_seg s;
             uint8_t rmac[6] = {};
             uint8_t rgid[16] = {};
             memset(&s, 0xa5, sizeof s);
             mlx5dv_set_dgram_seg(&s, (uint64_t){:#x}U << 32, {:#x}U, 1, {:#x}, 0, {:#x}, rmac, {:#x}, {:#x}, {:#x}U, rgid);",
            c_array(&d.rmac),
            c_array(&d.rgid),
            d.qkey,
            d.dqpn,
            d.sl,
            d.rlid,
            d.tclass,
            d.hop_limit,
            d.grh_gid_fl
        );
        c.probe.block(&setup, &[Print::bytes(&name, "s")]);
    }
    let (printed, mut r) = c.run("datagram_seg");
    for (i, d) in cases.iter().enumerate() {
        let name = format!("dgram[{i}]");
        let theirs = printed.bytes(&name);
        let mut ours = [0xa5u8; 48];
        let mut s = DatagramSeg::new_unchecked(&mut ours[..]);
        s.set_qkey(d.qkey);
        s.set_dqpn(d.dqpn);
        s.set_sl(d.sl);
        s.set_fl_mlid(0);
        s.set_rlid(d.rlid);
        s.set_rmac(d.rmac);
        s.set_tclass(d.tclass);
        s.set_hop_limit(d.hop_limit);
        s.set_grh_gid_fl(d.grh_gid_fl);
        s.set_rgid(d.rgid);
        if theirs.len() != ours.len() {
            r.failures.push(format!(
                "{name}: header {} bytes, ours {}",
                theirs.len(),
                ours.len()
            ));
            continue;
        }
        for (at, (&h, &o)) in theirs.iter().zip(&ours).enumerate() {
            if DGRAM_NOT_WRITTEN.contains(&at) {
                r.eq(
                    format!("{name} byte {at} (no setter; helper writes 0)"),
                    0,
                    h,
                );
            } else {
                r.eq(format!("{name} byte {at} vs DatagramSeg setters"), h, o);
            }
        }
        let g = DatagramSeg::new_checked(theirs).expect("48 bytes");
        r.eq(format!("{name} DatagramSeg::qkey"), d.qkey, g.qkey());
        r.eq(format!("{name} DatagramSeg::dqpn"), d.dqpn, g.dqpn());
        r.eq(
            format!("{name} dqp_dct & MLX5_EXTENDED_UD_AV"),
            wqe::EXTENDED_UD_AV,
            be32(&theirs[wqe::field::AV_DQP]) & wqe::EXTENDED_UD_AV,
        );
        r.eq(format!("{name} DatagramSeg::sl"), d.sl, g.sl());
        r.eq(format!("{name} DatagramSeg::rlid"), d.rlid, g.rlid());
        r.eq(format!("{name} DatagramSeg::rmac"), d.rmac, g.rmac());
        r.eq(format!("{name} DatagramSeg::tclass"), d.tclass, g.tclass());
        r.eq(
            format!("{name} DatagramSeg::hop_limit"),
            d.hop_limit,
            g.hop_limit(),
        );
        r.eq(
            format!("{name} DatagramSeg::grh_gid_fl"),
            d.grh_gid_fl,
            g.grh_gid_fl(),
        );
        r.eq(format!("{name} DatagramSeg::rgid"), d.rgid, g.rgid());
    }
    r.finish(&printed);
}

/// Segments the header has no helper for: filled through its struct members.
#[test]
fn raddr_atomic_inline_segs_match_header_structs() {
    let raddr = [
        (0x1122_3344_5566_7788u64, 0x99aa_bbccu32),
        (u64::MAX, u32::MAX),
        (0, 0),
    ];
    let atomic = [
        (0x0102_0304_0506_0708u64, 0xf0e0_d0c0_b0a0_9080u64),
        (u64::MAX, 0),
    ];
    let inline = [0u32, 1, 60, 0x7fff_ffff];
    let mut c = Checks::new();
    for (i, (va, rkey)) in raddr.iter().enumerate() {
        let name = format!("raddr[{i}]");
        c.probe.block(
            &format!(
                "struct mlx5_wqe_raddr_seg s;
                 memset(&s, 0xa5, sizeof s);
                 s.raddr = htobe64({va:#x}ULL);
                 s.rkey = htobe32({rkey:#x}U);
                 s.reserved = 0;"
            ),
            &[Print::bytes(&name, "s")],
        );
        let mut ours = [0xa5u8; 16];
        let mut s = RaddrSeg::new_unchecked(&mut ours[..]);
        s.set_raddr(*va);
        s.set_rkey(*rkey);
        c.expect_bytes(&name, "RaddrSeg setters", &ours);
    }
    for (i, (swap, cmp)) in atomic.iter().enumerate() {
        let name = format!("atomic[{i}]");
        c.probe.block(
            &format!(
                "struct mlx5_wqe_atomic_seg s;
                 memset(&s, 0xa5, sizeof s);
                 s.swap_add = htobe64({swap:#x}ULL);
                 s.compare = htobe64({cmp:#x}ULL);"
            ),
            &[Print::bytes(&name, "s")],
        );
        let mut ours = [0xa5u8; 16];
        let mut s = AtomicSeg::new_unchecked(&mut ours[..]);
        s.set_swap_add(*swap);
        s.set_compare(*cmp);
        c.expect_bytes(&name, "AtomicSeg setters", &ours);
    }
    for (i, len) in inline.iter().enumerate() {
        let name = format!("inline[{i}]");
        c.probe.block(
            &format!(
                "struct mlx5_wqe_inl_data_seg s;
                 memset(&s, 0xa5, sizeof s);
                 s.byte_count = htobe32({len:#x}U | MLX5_INLINE_SEG);"
            ),
            &[Print::bytes(&name, "s")],
        );
        let mut ours = [0xa5u8; 4];
        InlineSeg::new_unchecked(&mut ours[..]).set_byte_count(*len);
        c.expect_bytes(&name, "InlineSeg::set_byte_count", &ours);
    }
    let (printed, mut r) = c.run("raddr_atomic_inline");
    for (i, (va, rkey)) in raddr.iter().enumerate() {
        let name = format!("raddr[{i}]");
        let g = RaddrSeg::new_checked(printed.bytes(&name)).expect("16 bytes");
        r.eq(format!("{name} RaddrSeg::raddr"), *va, g.raddr());
        r.eq(format!("{name} RaddrSeg::rkey"), *rkey, g.rkey());
    }
    for (i, (swap, cmp)) in atomic.iter().enumerate() {
        let name = format!("atomic[{i}]");
        let g = AtomicSeg::new_checked(printed.bytes(&name)).expect("16 bytes");
        r.eq(format!("{name} AtomicSeg::swap_add"), *swap, g.swap_add());
        r.eq(format!("{name} AtomicSeg::compare"), *cmp, g.compare());
    }
    for (i, len) in inline.iter().enumerate() {
        let name = format!("inline[{i}]");
        let g = InlineSeg::new_checked(printed.bytes(&name)).expect("4 bytes");
        r.eq(format!("{name} InlineSeg::is_inline"), true, g.is_inline());
        r.eq(
            format!("{name} InlineSeg::byte_count"),
            *len,
            g.byte_count(),
        );
    }
    r.finish(&printed);
}

// ---------------------------------------------------------------------------
// CQEs: built both ways, decoded both ways, with the header's helpers.

#[derive(Clone, Copy)]
enum CqeBody {
    Success {
        byte_cnt: u32,
        imm: u32,
        timestamp: u64,
        rqpn: u32,
        sl: u8,
        grh: u8,
    },
    Error {
        syndrome: Syndrome,
        vendor: u8,
    },
}

#[derive(Clone, Copy)]
struct CqeCase {
    opcode: CqeOpcode,
    owner: bool,
    solicited: bool,
    send_opcode: u8,
    qpn: u32,
    wqe_counter: u16,
    body: CqeBody,
}

fn cqe_cases() -> Vec<CqeCase> {
    let mut cases = Vec::new();
    for (i, (opcode, _)) in named(cqe_opcode_name).into_iter().enumerate() {
        let i32 = i as u32;
        cases.push(CqeCase {
            opcode,
            owner: i % 2 == 1,
            solicited: i % 3 == 1,
            send_opcode: u8::from(WqeOpcode::RdmaWrite).wrapping_add(i as u8),
            qpn: (0x0012_3456 + i32 * 0x1_0101) & 0x00ff_ffff,
            wqe_counter: 0xfff0u16.wrapping_add(i as u16 * 3),
            body: CqeBody::Success {
                byte_cnt: 0x1000 * (i32 + 1),
                imm: 0xdead_beefu32.rotate_left(i32),
                timestamp: 0x0123_4567_89ab_cdefu64.rotate_left(i32 * 4),
                rqpn: 0x00ff_ffff - i32,
                sl: (i % 16) as u8,
                grh: (i % 4) as u8,
            },
        });
    }
    for (i, (syndrome, _)) in named(syndrome_name).into_iter().enumerate() {
        cases.push(CqeCase {
            opcode: if i % 2 == 0 {
                CqeOpcode::ReqErr
            } else {
                CqeOpcode::RespErr
            },
            owner: i % 2 == 0,
            solicited: false,
            send_opcode: u8::from(WqeOpcode::Send),
            qpn: 0x00ab_cd00 | i as u32,
            wqe_counter: i as u16,
            body: CqeBody::Error {
                syndrome,
                // MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT is 0x93.
                vendor: 0x90 + i as u8,
            },
        });
    }
    cases
}

fn our_cqe(k: &CqeCase) -> [u8; 64] {
    let mut b = [0xa5u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.clear_body();
    match k.body {
        CqeBody::Success {
            byte_cnt,
            imm,
            timestamp,
            rqpn,
            sl,
            grh,
        } => {
            c.set_flags_rqpn(rqpn, sl, grh);
            c.set_imm(imm);
            c.set_byte_cnt(byte_cnt);
            c.set_timestamp(timestamp);
        }
        CqeBody::Error { syndrome, vendor } => c.set_syndrome(syndrome, vendor),
    }
    c.set_sop_qpn(k.send_opcode, k.qpn);
    c.set_wqe_counter(k.wqe_counter);
    c.set_op_own(k.opcode, k.solicited, k.owner);
    b
}

#[test]
fn cqe_matches_header_structs_and_helpers() {
    const UNION: &str = "union { struct mlx5_cqe64 c; struct mlx5_err_cqe e; }";
    let cases = cqe_cases();
    let mut c = Checks::new();
    for (i, k) in cases.iter().enumerate() {
        let n = format!("cqe[{i}]");
        let opcode = cqe_opcode_name(k.opcode).expect("named opcode");
        let ours = our_cqe(k);
        let op = u64::from(u8::from(k.opcode));
        let (owner, se) = (u64::from(k.owner), u64::from(k.solicited));
        let sop = (u64::from(k.send_opcode) << 24) | u64::from(k.qpn);

        // `u`: built from the header's structs. SE is bit 1 and the opcode
        // bits 7..4 of op_own (the header's getters, checked on `u` below,
        // confirm both); the owner bit goes in with mlx5dv_set_cqe_owner. The
        // splits of flags_rqpn and sop_drop_qpn follow the reference (§8.2).
        // `v`: our bytes, decoded by the header's getters and struct members.
        let mut setup = format!(
            "{UNION} u, v;
             static const unsigned char ours[64] = {};
             memset(&u, 0, sizeof u);
             memcpy(&v, ours, sizeof v);
             u.c.sop_drop_qpn = htobe32(((uint32_t){:#x} << 24) | {:#x}U);
             u.c.wqe_counter = htobe16({:#x});
             u.c.op_own = (uint8_t)(({opcode} << 4) | ({se} << 1));
             mlx5dv_set_cqe_owner(&u.c, {owner});",
            c_array(&ours),
            k.send_opcode,
            k.qpn,
            k.wqe_counter,
        );
        // (name suffix, C expression, expected value)
        let mut nums: Vec<(&str, String, u64)> = vec![
            ("header_opcode", opcode.into(), op),
            ("u.opcode", "mlx5dv_get_cqe_opcode(&u.c)".into(), op),
            ("u.owner", "mlx5dv_get_cqe_owner(&u.c)".into(), owner),
            ("u.se", "mlx5dv_get_cqe_se(&u.c)".into(), se),
            ("u.format", "mlx5dv_get_cqe_format(&u.c)".into(), 0),
            ("v.opcode", "mlx5dv_get_cqe_opcode(&v.c)".into(), op),
            ("v.owner", "mlx5dv_get_cqe_owner(&v.c)".into(), owner),
            ("v.se", "mlx5dv_get_cqe_se(&v.c)".into(), se),
            ("v.format", "mlx5dv_get_cqe_format(&v.c)".into(), 0),
            ("v.sop_drop_qpn", "be32toh(v.c.sop_drop_qpn)".into(), sop),
            (
                "v.wqe_counter",
                "be16toh(v.c.wqe_counter)".into(),
                k.wqe_counter.into(),
            ),
        ];
        match k.body {
            CqeBody::Success {
                byte_cnt,
                imm,
                timestamp,
                rqpn,
                sl,
                grh,
            } => {
                let flags = (u32::from(grh) << 28) | (u32::from(sl) << 24) | rqpn;
                setup.push_str(&format!(
                    "
                     u.c.flags_rqpn = htobe32({flags:#x}U);
                     u.c.imm_inval_pkey = htobe32({imm:#x}U);
                     u.c.byte_cnt = htobe32({byte_cnt:#x}U);
                     u.c.timestamp = htobe64({timestamp:#x}ULL);"
                ));
                nums.extend([
                    (
                        "v.flags_rqpn",
                        "be32toh(v.c.flags_rqpn)".into(),
                        flags.into(),
                    ),
                    ("v.imm", "be32toh(v.c.imm_inval_pkey)".into(), imm.into()),
                    (
                        "v.byte_cnt",
                        "be32toh(v.c.byte_cnt)".into(),
                        byte_cnt.into(),
                    ),
                    ("v.timestamp", "be64toh(v.c.timestamp)".into(), timestamp),
                ]);
            }
            CqeBody::Error { syndrome, vendor } => {
                let s = syndrome_name(syndrome).expect("named syndrome");
                setup.push_str(&format!(
                    "
                     u.e.syndrome = {s};
                     u.e.vendor_err_synd = {vendor:#x};"
                ));
                let synd = u8::from(syndrome).into();
                nums.extend([
                    ("header_syndrome", s.into(), synd),
                    ("v.syndrome", "v.e.syndrome".into(), synd),
                    ("v.vendor", "v.e.vendor_err_synd".into(), vendor.into()),
                    (
                        "v.s_wqe_opcode_qpn",
                        "be32toh(v.e.s_wqe_opcode_qpn)".into(),
                        sop,
                    ),
                ]);
            }
        }
        let mut prints = vec![Print::bytes(&n, "u")];
        for (suffix, expr, want) in nums {
            let name = format!("{n}.{suffix}");
            prints.push(Print::num(&name, expr));
            c.expect_num(&name, format!("the {:?} case", k.opcode), want);
        }
        c.probe.block(&setup, &prints);
        c.expect_bytes(&n, "Cqe64 setters", &ours);
    }

    // The initial op_own, decoded by the header's getters.
    c.probe.block(
        &format!(
            "struct mlx5_cqe64 v;
             memset(&v, 0, sizeof v);
             v.op_own = {:#x};",
            cqe::OP_OWN_INIT
        ),
        &[
            Print::num("init.opcode", "mlx5dv_get_cqe_opcode(&v)"),
            Print::num("init.owner", "mlx5dv_get_cqe_owner(&v)"),
        ],
    );
    c.expect_num(
        "init.opcode",
        "CqeOpcode::Invalid",
        u8::from(CqeOpcode::Invalid),
    );
    c.expect_num("init.owner", "owner 0", 0u8);

    // The C-built CQEs, decoded by our getters.
    let (p, mut r) = c.run("cqe");
    for (i, k) in cases.iter().enumerate() {
        let n = format!("cqe[{i}]");
        let g = Cqe64::new_checked(p.bytes(&n)).expect("64 bytes");
        r.eq(format!("{n} Cqe64::opcode"), k.opcode, g.opcode());
        r.eq(format!("{n} Cqe64::owner"), k.owner, g.owner());
        r.eq(
            format!("{n} Cqe64::is_solicited"),
            k.solicited,
            g.is_solicited(),
        );
        r.eq(
            format!("{n} Cqe64::send_opcode"),
            k.send_opcode,
            g.send_opcode(),
        );
        r.eq(format!("{n} Cqe64::qpn"), k.qpn, g.qpn());
        r.eq(
            format!("{n} Cqe64::wqe_counter"),
            k.wqe_counter,
            g.wqe_counter(),
        );
        match k.body {
            CqeBody::Success {
                byte_cnt,
                imm,
                timestamp,
                rqpn,
                sl,
                grh,
            } => {
                r.eq(format!("{n} Cqe64::rqpn"), rqpn, g.rqpn());
                r.eq(format!("{n} Cqe64::sl"), sl, g.sl());
                r.eq(format!("{n} Cqe64::grh"), grh, g.grh());
                r.eq(format!("{n} Cqe64::imm"), imm, g.imm());
                r.eq(format!("{n} Cqe64::byte_cnt"), byte_cnt, g.byte_cnt());
                r.eq(format!("{n} Cqe64::timestamp"), timestamp, g.timestamp());
            }
            CqeBody::Error { syndrome, vendor } => {
                r.eq(format!("{n} Cqe64::syndrome"), syndrome, g.syndrome());
                r.eq(
                    format!("{n} Cqe64::vendor_syndrome"),
                    vendor,
                    g.vendor_syndrome(),
                );
            }
        }
    }
    r.finish(&p);
}

// ---------------------------------------------------------------------------
// Doorbell records and the CQ arm doorbell.

#[test]
fn doorbells_match_header() {
    let qp = [(0u16, 0u16), (0x0102, 0xfffe), (u16::MAX, 1)];
    // (sn, solicited only, ci, cqn)
    let arm = [
        (0u8, false, 0u32, 0u32),
        (2, true, 0x12_3456, 7),
        (3, false, 0xff_ffff, 0xff_ffff),
        (1, true, 0, 0xab_cdef),
    ];
    let mut c = Checks::new();
    for (i, (rq, sq)) in qp.iter().enumerate() {
        let name = format!("qp_dbrec[{i}]");
        // As the provider writes them (reference §4.1), at the header's indices.
        c.probe.block(
            &format!(
                "__be32 rec[MLX5_SND_DBR + 1];
                 memset(rec, 0xa5, sizeof rec);
                 rec[MLX5_RCV_DBR] = htobe32({rq:#x} & 0xffff);
                 rec[MLX5_SND_DBR] = htobe32({sq:#x} & 0xffff);"
            ),
            &[Print::bytes(&name, "rec")],
        );
        let mut ours = [0xa5u8; dbr::DBR_LEN];
        let mut r = QpDoorbellRecord::new_unchecked(&mut ours[..]);
        r.set_recv_counter(*rq);
        r.set_send_counter(*sq);
        c.expect_bytes(&name, "QpDoorbellRecord setters", &ours);
    }
    for (i, &(sn, sol, ci, cqn)) in arm.iter().enumerate() {
        let name = format!("cq_arm[{i}]");
        let cmd = if sol {
            "MLX5_CQ_DB_REQ_NOT_SOL"
        } else {
            "MLX5_CQ_DB_REQ_NOT"
        };
        // The 64-bit MMIO value of reference §8.6, with the header's commands.
        c.probe.block(
            &format!(
                "uint64_t db = htobe64(((uint64_t)(((uint32_t){sn} << 28) | {cmd} | {ci:#x}U) << 32) | {cqn:#x}U);"
            ),
            &[Print::bytes(&name, "db")],
        );
        let db = CqArmDoorbell {
            sn,
            solicited_only: sol,
            ci,
            cqn,
        };
        c.expect_bytes(&name, "CqArmDoorbell::emit", &db.emit());
    }
    let (printed, mut r) = c.run("doorbells");
    for (i, (rq, sq)) in qp.iter().enumerate() {
        let name = format!("qp_dbrec[{i}]");
        let g = QpDoorbellRecord::new_checked(printed.bytes(&name)).expect("8 bytes");
        r.eq(format!("{name} recv_counter"), *rq, g.recv_counter());
        r.eq(format!("{name} send_counter"), *sq, g.send_counter());
    }
    for (i, &(sn, sol, ci, cqn)) in arm.iter().enumerate() {
        let name = format!("cq_arm[{i}]");
        let theirs = printed.bytes(&name);
        let Ok(b) = <[u8; 8]>::try_from(theirs) else {
            r.failures.push(format!("{name}: {} bytes", theirs.len()));
            continue;
        };
        let want = CqArmDoorbell {
            sn,
            solicited_only: sol,
            ci,
            cqn,
        };
        r.eq(
            format!("{name} CqArmDoorbell::parse"),
            want,
            CqArmDoorbell::parse(&b),
        );
        r.eq(
            format!("{name} CqArmDoorbell::arm_word"),
            be32(&b),
            want.arm_word(),
        );
        // The same word goes to the CQ doorbell record's arm word.
        let mut rec = [0u8; dbr::DBR_LEN];
        CqDoorbellRecord::new_unchecked(&mut rec[..]).set_arm(want.arm_word());
        r.eq(
            format!("{name} CqDoorbellRecord::set_arm"),
            &b[..4],
            &rec[dbr::field::WORD1],
        );
    }
    r.finish(&printed);
}
