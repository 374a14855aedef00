//! The `Tcp:` and `TcpExt:` counters of `/proc/net/snmp` and
//! `/proc/net/netstat`, under the kernel's names.

macro_rules! mib {
    ($(#[$m:meta])* $name:ident, $group:literal { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        #[allow(non_snake_case)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }
        impl $name {
            /// The group's name in `/proc/net`.
            pub const GROUP: &'static str = $group;
            /// Every counter with its kernel name, in the kernel's order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($field), self.$field)),*].into_iter()
            }
        }
    };
}

mib!(
    /// `Tcp:` in `/proc/net/snmp` (RFC 4022's counters).
    Tcp, "Tcp" {
        /// Connections that went SYN_SENT from CLOSED.
        ActiveOpens,
        /// Connections that went SYN_RECV from LISTEN.
        PassiveOpens,
        /// Attempts that failed: SYN_SENT or SYN_RECV to CLOSED.
        AttemptFails,
        /// Resets in ESTABLISHED or CLOSE_WAIT.
        EstabResets,
        /// Segments received, in error or not.
        InSegs,
        /// Segments sent, retransmissions excluded.
        OutSegs,
        /// Segments retransmitted.
        RetransSegs,
        /// Segments received in error (malformed, bad checksum).
        InErrs,
        /// Resets sent.
        OutRsts,
        /// Segments whose checksum was wrong.
        InCsumErrors,
    }
);

mib!(
    /// `TcpExt:` in `/proc/net/netstat` (the ones rxpath's TCP counts).
    TcpExt, "TcpExt" {
        /// A SYN or final ACK dropped because the accept queue was full.
        ListenOverflows,
        /// Every drop at a listener.
        ListenDrops,
        /// Delayed ACKs sent by the timer.
        DelayedACKs,
        /// Segments received again that a delayed ACK may have failed to
        /// acknowledge (a retransmission of what is in already).
        DelayedACKLost,
        /// Segments dropped by PAWS in an established connection.
        PAWSEstab,
        /// SYN-ACKs reset for echoing a timestamp this end never sent.
        PAWSActiveRejected,
        /// Retransmission timeouts.
        TCPTimeouts,
        /// D-SACKs sent for old data.
        TCPDSACKOldSent,
        /// D-SACKs sent for out-of-order data.
        TCPDSACKOfoSent,
        /// Segments queued out of order.
        TCPOFOQueue,
        /// Out-of-order segments dropped for want of receive space.
        TCPOFODrop,
        /// Challenge ACKs sent (RFC 5961).
        TCPChallengeACK,
        /// SYN cookies sent.
        SyncookiesSent,
        /// SYN cookies received and accepted.
        SyncookiesRecv,
        /// ACKs to a listener whose cookie did not check out.
        SyncookiesFailed,
        /// Connections reset because the application closed with unread data.
        TCPAbortOnClose,
        /// Connections reset because the application closed with linger 0.
        TCPAbortOnLinger,
        /// Connections given up after too many retransmissions.
        TCPAbortOnTimeout,
        /// Zero-window probes... and keepalives that went unanswered.
        TCPAbortOnData,
        /// Recoveries entered with SACK.
        TCPSackRecovery,
        /// Recoveries entered without SACK.
        TCPRenoRecovery,
        /// Recoveries undone: every retransmission was needless.
        TCPFullUndo,
        /// Timeouts F-RTO found spurious.
        TCPSpuriousRTOs,
        /// Reordering seen in SACKs.
        TCPSACKReorder,
        /// Keepalive probes sent.
        TCPKeepAlive,
        /// Connections given up after unanswered keepalive probes.
        TCPKeepAliveTimeouts,
        /// Retransmissions the device refused (`NET_XMIT_DROP`).
        TCPRetransFail,
        /// Tail-loss probes sent.
        TCPLossProbes,
        /// Zero-window probes sent.
        TCPWinProbe,
        /// Segments that carried data received in order and ACKed by the
        /// fast path.
        TCPHPHits,
        /// Pure ACKs received.
        TCPPureAcks,
        /// ICMP errors quoting a sequence number outside what is in
        /// flight.
        OutOfWindowIcmps,
        /// Bare ACKs dropped while `TCP_DEFER_ACCEPT` waits for data.
        TCPDeferAcceptDrop,
        /// SYNs whose data (Fast Open) the peer acknowledged.
        TCPFastOpenActive,
        /// SYNs with data the peer did not acknowledge: the data went
        /// again after the handshake.
        TCPFastOpenActiveFail,
        /// SYNs whose data a listener took with a valid cookie (or none
        /// needed): a connection before the handshake ends.
        TCPFastOpenPassive,
        /// SYNs with a cookie that did not check: data left for the
        /// handshake, the right cookie in the SYN-ACK.
        TCPFastOpenPassiveFail,
        /// SYNs a Fast Open listener could not take for its queue of
        /// half-open Fast Open connections being full.
        TCPFastOpenListenOverflow,
        /// SYNs asking for a cookie.
        TCPFastOpenCookieReqd,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_carry_the_kernels_names() {
        let t = Tcp {
            OutRsts: 3,
            ..Tcp::default()
        };
        let names: Vec<_> = t.iter().map(|(n, _)| n).collect();
        assert_eq!(names[0], "ActiveOpens");
        assert_eq!(t.iter().find(|(n, _)| *n == "OutRsts").unwrap().1, 3);
        assert_eq!(TcpExt::GROUP, "TcpExt");
    }
}
