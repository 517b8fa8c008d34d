//! Asynchronous events the device raises for host software (the EQEs of
//! mlx5's event queues, as the driver decodes them).

use doorbell_layout::eqe::{self, Eqe64, EventType};
use doorbell_types::{Cqn, Qpn, Srqn};

/// An asynchronous event of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicEvent {
    /// An armed CQ got a completion.
    Completion(Cqn),
    /// A CQ overflowed; CQEs were lost.
    CqError(Cqn),
    /// A QP moved to the error state by itself.
    QpFatal(Qpn),
    /// An armed SRQ holds fewer posted WQEs than its limit
    /// (IBV_EVENT_SRQ_LIMIT_REACHED); it is disarmed until armed again.
    SrqLimit(Srqn),
    /// A QP with an SRQ is in the error state and will take no more WQEs
    /// from it (IBV_EVENT_QP_LAST_WQE_REACHED): its own WQEs are flushed.
    QpLastWqeReached(Qpn),
    /// The port's link went down (IBV_EVENT_PORT_ERR).
    PortDown(u8),
    /// The port's link came up (IBV_EVENT_PORT_ACTIVE).
    PortUp(u8),
}

impl NicEvent {
    /// The EQE type that carries the event.
    pub fn eqe_type(&self) -> EventType {
        match self {
            NicEvent::Completion(_) => EventType::Comp,
            NicEvent::CqError(_) => EventType::CqError,
            NicEvent::QpFatal(_) => EventType::WqCatasError,
            NicEvent::SrqLimit(_) => EventType::SrqRqLimit,
            NicEvent::QpLastWqeReached(_) => EventType::SrqLastWqe,
            NicEvent::PortDown(_) | NicEvent::PortUp(_) => EventType::PortChange,
        }
    }

    /// Fills `eqe` with the event, as the device writes it (all but the
    /// owner byte). A CQ error is reported as an overrun.
    pub fn write_eqe<T: AsRef<[u8]> + AsMut<[u8]>>(&self, eqe: &mut Eqe64<T>) {
        eqe.clear_body();
        let sub_type = match self {
            NicEvent::PortDown(_) => eqe::PORT_SUBTYPE_DOWN,
            NicEvent::PortUp(_) => eqe::PORT_SUBTYPE_ACTIVE,
            _ => 0,
        };
        eqe.set_type(self.eqe_type(), sub_type);
        match *self {
            NicEvent::Completion(c) => eqe.set_comp_cqn(c.get()),
            NicEvent::CqError(c) => eqe.set_cq_err(c.get(), eqe::CQ_SYNDROME_OVERRUN),
            NicEvent::QpFatal(q) | NicEvent::QpLastWqeReached(q) => {
                eqe.set_qp_srq(eqe::QUEUE_TYPE_QP, q.get());
            }
            NicEvent::SrqLimit(s) => eqe.set_qp_srq(eqe::QUEUE_TYPE_QP, s.get()),
            NicEvent::PortDown(p) | NicEvent::PortUp(p) => eqe.set_port(p),
        }
    }

    /// The event an EQE reports, as the kernel's EQ handler decodes it;
    /// `None` for a type or sub-type doorbell does not raise.
    pub fn from_eqe<T: AsRef<[u8]>>(eqe: &Eqe64<T>) -> Option<Self> {
        Some(match eqe.event_type() {
            EventType::Comp => NicEvent::Completion(Cqn::new(eqe.comp_cqn())),
            EventType::CqError => NicEvent::CqError(Cqn::new(eqe.cq_err_cqn())),
            EventType::WqCatasError => NicEvent::QpFatal(Qpn::new(eqe.qp_srq_n())),
            EventType::SrqRqLimit => NicEvent::SrqLimit(Srqn::new(eqe.qp_srq_n())),
            EventType::SrqLastWqe => NicEvent::QpLastWqeReached(Qpn::new(eqe.qp_srq_n())),
            EventType::PortChange => match eqe.sub_type() {
                eqe::PORT_SUBTYPE_DOWN => NicEvent::PortDown(eqe.port()),
                eqe::PORT_SUBTYPE_ACTIVE => NicEvent::PortUp(eqe.port()),
                _ => return None,
            },
            EventType::Unknown(_) => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_survives_an_eqe() {
        let all = [
            NicEvent::Completion(Cqn::new(0x12_3456)),
            NicEvent::CqError(Cqn::new(7)),
            NicEvent::QpFatal(Qpn::new(0x100)),
            NicEvent::SrqLimit(Srqn::new(3)),
            NicEvent::QpLastWqeReached(Qpn::new(0x101)),
            NicEvent::PortDown(1),
            NicEvent::PortUp(1),
        ];
        for e in all {
            let mut b = [0xaau8; eqe::EQE_LEN];
            let mut v = Eqe64::new_unchecked(&mut b[..]);
            e.write_eqe(&mut v);
            assert_eq!(b[eqe::field::OWNER], 0xaa, "the owner byte is the caller's");
            assert_eq!(NicEvent::from_eqe(&Eqe64::new_unchecked(&b[..])), Some(e));
        }
    }

    #[test]
    fn unknown_types_decode_to_nothing() {
        let mut b = [0u8; eqe::EQE_LEN];
        b[eqe::field::TYPE] = 0x0a; // a command completion: not a verbs event
        assert_eq!(NicEvent::from_eqe(&Eqe64::new_unchecked(&b[..])), None);
    }
}
