//! Constants that `infiniband/mlx5dv.h` does not define: rdma-core keeps them
//! in provider-private headers (`providers/mlx5/mlx5.h`, `wqe.h`) or only in
//! code, and the kernel in `include/linux/mlx5/*`. They cannot be compiled
//! against, so they are checked here against the numbers in
//! `shared/reference/mlx5-host-interface.md` (section given on each line).

use doorbell_layout::{cqe, dbr, uar, wqe};

#[test]
fn private_constants_match_reference_document() {
    let mut failures = Vec::new();
    macro_rules! check {
        ($ours:expr, $want:expr, $section:literal) => {
            if $ours != $want {
                failures.push(format!(
                    "{} = {:#x}, reference {} says {:#x}",
                    stringify!($ours),
                    $ours,
                    $section,
                    $want
                ));
            }
        };
    }

    // UAR page.
    check!(uar::UAR_PAGE_SIZE, 4096, "§1.1 (MLX5_ADAPTER_PAGE_SIZE)");
    check!(1usize << uar::LOG_UAR_SIZE, uar::UAR_PAGE_SIZE, "§1.1");
    check!(uar::BF_OFFSET, 0x800, "§1.1 (MLX5_BF_OFFSET)");
    check!(uar::BF_REG_SIZE, 512, "§1.1 (typical 1 << log_bf_reg_size)");
    check!(uar::BF_BUF_SIZE, 256, "§1.1 (two equal buffers)");
    check!(uar::EQ_DOORBELL, 0x40, "§1.1 (MLX5_EQ_DOORBELL_OFFSET)");
    check!(uar::BFREGS_PER_UAR, 4, "§1.2 (MLX5_BFREGS_PER_UAR)");
    check!(
        uar::NON_FP_BFREGS_PER_UAR,
        2,
        "§1.2 (MLX5_NON_FP_BFREGS_PER_UAR)"
    );
    check!(uar::FP_BFREGS_PER_UAR, 2, "§1.2 (MLX5_FP_BFREGS_PER_UAR)");
    check!(uar::BF_CHUNK, 64, "§6.2 (BlueFlame copy in 64-byte chunks)");
    check!(uar::DOORBELL_LEN, 8, "§6.1 (one 64-bit MMIO store)");

    // Doorbell records.
    check!(dbr::CQ_SET_CI, 0, "§4.1 (MLX5_CQ_SET_CI)");
    check!(dbr::CQ_ARM_DB, 1, "§4.1 (MLX5_CQ_ARM_DB)");

    // Send WQE.
    check!(wqe::DS_LEN, 16, "§5.1 (DS = 16-byte unit)");
    check!(wqe::MAX_DS, 0x3f, "§5.3 (qpn_ds bits 5..0)");
    check!(
        wqe::ctrl_flags::CE_MASK,
        3 << 2,
        "§5.3 (CE field, CQ_UPDATE = 2 << 2)"
    );
    check!(
        wqe::ctrl_flags::FM_MASK,
        7 << 5,
        "§5.3 (fence mode, bits 7..5)"
    );

    // CQE.
    check!(cqe::OP_OWN_INIT, 0xf0, "§8.1 (buffer init)");
    check!(cqe::OPCODE_SHIFT, 4, "§8.2 (op_own bits 7..4)");
    check!(cqe::SOLICITED_MASK, 1 << 1, "§8.2 (op_own bit 1)");
    check!(cqe::SL_SHIFT, 24, "§8.2 (flags_rqpn bits 27..24)");
    check!(cqe::GRH_SHIFT, 28, "§8.2 (flags_rqpn bits 29..28)");

    assert!(
        failures.is_empty(),
        "doorbell-layout disagrees with shared/reference/mlx5-host-interface.md:\n  {}",
        failures.join("\n  ")
    );
}
