//! MODIFY_MKEY: an mkey's context rewritten in place under its key.

use doorbell_hif::{Access, CmdError, CmdOut, Command, MkeyParams, ObjKind, Param};
use doorbell_types::{Mkey, Pdn};

use crate::Rig;

fn params(rig: &Rig, pd: Pdn, len: u64) -> MkeyParams {
    MkeyParams {
        pd,
        access: Access(Access::LOCAL_WRITE),
        start: rig.mr_buf.get(),
        len,
        mtt: vec![rig.mr_buf],
    }
}

#[test]
fn modify_mkey_keeps_the_key_and_checks_as_create_does() {
    let mut rig = Rig::new();
    let (pd, key) = (rig.pd, rig.mr);
    let p = params(&rig, pd, 64);
    assert_eq!(
        rig.exec(Command::ModifyMkey(key, p.clone())),
        Ok(CmdOut::Done)
    );
    // Another variant of the same index is another key: not found.
    let stale = Mkey::from_parts(key.index(), key.variant().wrapping_add(1));
    assert!(matches!(
        rig.exec(Command::ModifyMkey(stale, p.clone())),
        Err(CmdError::NoSuchObject {
            kind: ObjKind::Mkey,
            ..
        })
    ));
    assert!(matches!(
        rig.exec(Command::ModifyMkey(key, params(&rig, Pdn::new(0xabc), 64))),
        Err(CmdError::NoSuchObject {
            kind: ObjKind::Pd,
            ..
        })
    ));
    // More pages than the MTT holds.
    assert!(matches!(
        rig.exec(Command::ModifyMkey(key, params(&rig, pd, 3 * 4096))),
        Err(CmdError::BadParam {
            name: Param::MttEntries,
            ..
        })
    ));
    // The key is still good after the refusals: it can be destroyed.
    assert_eq!(rig.exec(Command::DestroyMkey(key)), Ok(CmdOut::Done));
}
