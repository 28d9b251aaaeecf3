-- 0015_egress.sql — webhook URL literals checked against the egress ranges.
--
-- Holdfast has one egress policy for every outbound request a tenant or a
-- model can aim (engine/src/egress.rs): an address in a special-purpose range
-- of the IANA IPv4/IPv6 Special-Purpose Address Registries that is not
-- globally reachable, multicast, broadcast or deprecated site-local is
-- refused unless the operator allows it (HOLDFAST_EGRESS_ALLOW).
--
-- The split: SQL checks the URL *literal* when a webhook endpoint is
-- registered (so a plain SQL call cannot register http://169.254.169.254/),
-- with the deployment's yes/no switch p_allow_private (the API passes
-- whether any webhook range is allowed, after checking the literal against
-- the exact ranges itself). Rust checks every *resolved* address at send
-- time, with the exact ranges. Here the ranges are brought in line with
-- Rust's table: 0007 missed ::/96, 2002::/16, fec0::/10, the documentation,
-- discard, Teredo, benchmarking and segment-routing blocks, and the
-- globally reachable exceptions (anycast services inside 192.0.0.0/24 and
-- 2001::/23). One deliberate difference: literals of the IPv4-embedding
-- forms (::ffff:0:0/96, ::/96, 64:ff9b::/96, 2002::/16) are refused here
-- whatever IPv4 address they carry (nobody writes them by hand), while at
-- send time a resolved NAT64 or 6to4 address is judged by its IPv4 part
-- (DNS64 networks return them for public hosts).

-- True when a URL host names a special-purpose (non-public) address: the
-- local names (`localhost`, `*.localhost`, `.local`, `.internal`,
-- `.home.arpa`), IP literals in the refused ranges of engine/src/egress.rs,
-- and numeric hosts that are not a plain dotted quad (URL parsers read
-- `127.1` or `2130706433` as 127.0.0.1). p_host is lower case, without
-- brackets or port. A DNS name that resolves to a private address is not
-- caught here: the dispatcher checks resolved addresses before it connects.
-- Locks nothing; raises nothing.
CREATE OR REPLACE FUNCTION holdfast.is_private_host(p_host text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_ip inet;
BEGIN
    IF p_host = 'localhost' OR p_host ~ '\.(localhost|local|internal|home\.arpa)$' THEN
        RETURN true;
    END IF;
    IF substring(p_host FROM '[^.]*$') ~ '^([0-9]+|0x[0-9a-f]*)$' THEN
        -- The last label is a number: URL parsers read the host as IPv4.
        IF p_host !~ '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$' THEN
            RETURN true;
        END IF;
        v_ip := p_host::inet;
    ELSIF position(':' IN p_host) > 0 THEN
        BEGIN
            v_ip := p_host::inet;
        EXCEPTION WHEN invalid_text_representation THEN
            RETURN true;
        END;
    ELSE
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '192.0.0.9/32', '192.0.0.10/32', '2001:1::1/128', '2001:1::2/128', '2001:1::3/128',
            '2001:3::/32', '2001:4:112::/48', '2001:20::/28', '2001:30::/28']::inet[]) AS r (range)
         WHERE r.range >>= v_ip) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16',
            '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24',
            '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24',
            '224.0.0.0/4', '240.0.0.0/4',
            '::/96', '::ffff:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', '100::/64', '100:0:0:1::/64',
            '2001::/23', '2001:db8::/32', '2002::/16', '3fff::/20', '5f00::/16',
            'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8']::inet[]) AS r (range)
         WHERE r.range >>= v_ip);
END
$$;
