//! A DER tree for editing PKCS#7 signatures: parse into tag/length/value nodes, change a
//! node, encode again with fresh (definite, minimal) lengths, or with the outer length
//! indefinite (BER) for the rule that the kernel's decoder accepts it.
//!
//! Limits: single-byte tags only (all of PKCS#7 and X.509 use them); input must be DER or
//! BER with definite lengths.

/// One TLV node: the tag byte and either primitive content or children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub tag: u8,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Prim(Vec<u8>),
    Cons(Vec<Node>),
}

/// Reads one length at `d[i..]`; returns (length, header bytes used).
fn read_len(d: &[u8], i: usize) -> (usize, usize) {
    let b = d[i];
    if b < 0x80 {
        (b as usize, 1)
    } else {
        let n = (b & 0x7f) as usize;
        assert!(n > 0 && n <= 4, "unsupported DER length form {b:#x}");
        let mut l = 0usize;
        for k in 0..n {
            l = (l << 8) | d[i + 1 + k] as usize;
        }
        (l, 1 + n)
    }
}

/// Parses `d` (one element, nothing after it).
pub fn parse(d: &[u8]) -> Node {
    let (n, used) = parse_at(d, 0);
    assert_eq!(used, d.len(), "trailing bytes after the DER element");
    n
}

fn parse_at(d: &[u8], i: usize) -> (Node, usize) {
    let tag = d[i];
    assert!(tag & 0x1f != 0x1f, "multi-byte tag");
    let (len, lh) = read_len(d, i + 1);
    let start = i + 1 + lh;
    let content = &d[start..start + len];
    let body = if tag & 0x20 != 0 {
        let mut kids = Vec::new();
        let mut j = 0;
        while j < content.len() {
            let (k, used) = parse_at(content, j);
            kids.push(k);
            j = used;
        }
        Body::Cons(kids)
    } else {
        Body::Prim(content.to_vec())
    };
    (Node { tag, body }, start + len)
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    if let Ok(short @ 0..0x80) = u8::try_from(len) {
        out.push(short);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | u8::try_from(bytes.len() - skip).expect("a usize has at most 8 bytes"));
        out.extend_from_slice(&bytes[skip..]);
    }
}

impl Node {
    pub fn prim(tag: u8, content: &[u8]) -> Node {
        Node {
            tag,
            body: Body::Prim(content.to_vec()),
        }
    }

    pub fn cons(tag: u8, kids: Vec<Node>) -> Node {
        Node {
            tag,
            body: Body::Cons(kids),
        }
    }

    /// DER encoding (definite lengths).
    pub fn encode(&self) -> Vec<u8> {
        let content = self.content();
        let mut out = vec![self.tag];
        push_len(&mut out, content.len());
        out.extend_from_slice(&content);
        out
    }

    /// BER encoding of this node with an indefinite length (`0x80` ... `00 00`); its
    /// children stay DER.
    pub fn encode_indefinite(&self) -> Vec<u8> {
        assert!(matches!(self.body, Body::Cons(_)), "indefinite primitive");
        let mut out = vec![self.tag, 0x80];
        out.extend_from_slice(&self.content());
        out.extend_from_slice(&[0, 0]);
        out
    }

    fn content(&self) -> Vec<u8> {
        match &self.body {
            Body::Prim(c) => c.clone(),
            Body::Cons(kids) => kids.iter().flat_map(Node::encode).collect(),
        }
    }

    pub fn kids(&self) -> &Vec<Node> {
        match &self.body {
            Body::Cons(k) => k,
            Body::Prim(_) => panic!("tag {:#x} is primitive", self.tag),
        }
    }

    pub fn kids_mut(&mut self) -> &mut Vec<Node> {
        match &mut self.body {
            Body::Cons(k) => k,
            Body::Prim(_) => panic!("tag {:#x} is primitive", self.tag),
        }
    }

    pub fn bytes(&self) -> &Vec<u8> {
        match &self.body {
            Body::Prim(c) => c,
            Body::Cons(_) => panic!("tag {:#x} is constructed", self.tag),
        }
    }

    pub fn bytes_mut(&mut self) -> &mut Vec<u8> {
        match &mut self.body {
            Body::Prim(c) => c,
            Body::Cons(_) => panic!("tag {:#x} is constructed", self.tag),
        }
    }
}

/// Tags used below.
pub const SEQ: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const INT: u8 = 0x02;
pub const OID: u8 = 0x06;
pub const NULL: u8 = 0x05;
pub const OCTETS: u8 = 0x04;
pub const CTX0: u8 = 0xa0;

/// Encodes a dotted OID's content bytes.
pub fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().unwrap()).collect();
    let mut out =
        vec![u8::try_from(arcs[0] * 40 + arcs[1]).expect("the first two OID arcs fit one byte")];
    for &a in &arcs[2..] {
        let mut stack = vec![(a & 0x7f) as u8];
        let mut v = a >> 7;
        while v > 0 {
            stack.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        out.extend(stack.iter().rev());
    }
    out
}

/// A `SEQUENCE { OID, NULL }` or `SEQUENCE { OID }` AlgorithmIdentifier.
pub fn alg(dotted: &str, null: bool) -> Node {
    let mut kids = vec![Node::prim(OID, &oid(dotted))];
    if null {
        kids.push(Node::prim(NULL, &[]));
    }
    Node::cons(SEQ, kids)
}

/// A view of a detached PKCS#7 SignedData (`ContentInfo { OID, [0] { SignedData } }`).
#[derive(Debug, Clone)]
pub struct Pkcs7(pub Node);

impl Pkcs7 {
    pub fn parse(der: &[u8]) -> Pkcs7 {
        Pkcs7(parse(der))
    }

    pub fn encode(&self) -> Vec<u8> {
        self.0.encode()
    }

    /// The outer contentType OID node.
    pub fn content_type(&mut self) -> &mut Vec<u8> {
        self.0.kids_mut()[0].bytes_mut()
    }

    /// The SignedData SEQUENCE.
    pub fn signed_data(&mut self) -> &mut Node {
        &mut self.0.kids_mut()[1].kids_mut()[0]
    }

    /// SignedData fields: version, digestAlgorithms, encapContentInfo, then optional
    /// `[0]` certificates and `[1]` crls, then signerInfos (last).
    pub fn version(&mut self) -> &mut Vec<u8> {
        self.signed_data().kids_mut()[0].bytes_mut()
    }

    pub fn digest_algorithms(&mut self) -> &mut Vec<Node> {
        self.signed_data().kids_mut()[1].kids_mut()
    }

    pub fn encap(&mut self) -> &mut Node {
        &mut self.signed_data().kids_mut()[2]
    }

    /// The `[0]` certificates, inserted (empty) when absent.
    pub fn certificates(&mut self) -> &mut Vec<Node> {
        let sd = self.signed_data().kids_mut();
        if sd[3].tag != CTX0 {
            sd.insert(3, Node::cons(CTX0, Vec::new()));
        }
        sd[3].kids_mut()
    }

    pub fn signer_infos(&mut self) -> &mut Vec<Node> {
        self.signed_data().kids_mut().last_mut().unwrap().kids_mut()
    }

    /// One SignerInfo: version, sid, digestAlgorithm, `[0]` signedAttrs?,
    /// signatureAlgorithm, signature, `[1]` unsignedAttrs?.
    pub fn signer(&mut self, i: usize) -> &mut Node {
        &mut self.signer_infos()[i]
    }
}

/// Index of the signatureAlgorithm in a SignerInfo (after the optional signed attributes).
pub fn signer_sig_alg_index(si: &Node) -> usize {
    if si.kids()[3].tag == CTX0 {
        4
    } else {
        3
    }
}
