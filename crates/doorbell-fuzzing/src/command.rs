//! Device commands in their byte form (`doorbell_hif::codec`), decoded and
//! run by a NIC (`Nic::exec`).

use doorbell_hif::Command;
use doorbell_hif::codec::{decode_result, encode_result};

use crate::input::Input;
use crate::rig::Rig;

/// Commands [`command`] runs at most.
pub const MAX_COMMANDS: usize = 16;

/// Target `command`: up to [`MAX_COMMANDS`] commands, each a `u16` length
/// and that many bytes. Each is decoded; one that decodes must encode and
/// decode back to itself, and is run by a rig's NIC, whose result must
/// survive its own byte form. Nothing may panic.
pub fn command(data: &[u8]) {
    let mut input = Input::new(data);
    let mut rig = Rig::new();
    for _ in 0..MAX_COMMANDS {
        if input.is_empty() {
            break;
        }
        let Ok(cmd) = Command::decode(input.long_bytes()) else {
            continue;
        };
        let mut bytes = Vec::new();
        cmd.encode(&mut bytes);
        assert_eq!(
            Command::decode(&bytes),
            Ok(cmd.clone()),
            "command round trip"
        );
        let result = rig.exec(cmd);
        let mut out = Vec::new();
        encode_result(&result, &mut out);
        assert_eq!(decode_result(&out), Ok(result), "result round trip");
        rig.drain();
        rig.consume_cqes();
    }
}

/// Target `command_result`: the input is a command's result in byte form.
/// One that decodes must encode to bytes that decode to it again.
pub fn command_result(data: &[u8]) {
    let Ok(result) = decode_result(data) else {
        return;
    };
    let mut out = Vec::new();
    encode_result(&result, &mut out);
    assert_eq!(decode_result(&out), Ok(result), "result round trip");
}
