#!/usr/bin/env python3
"""The string ops of opsets 19 and 20 (Equal on strings, StringConcat, StringSplit,
RegexFullMatch) as small onnx.helper models (libonnx 1.12 knows none of them: no checker)
with their expected outputs, checked four ways:

  make_string_models.py KILN_CONFORMANCE --kiln KILN [--ort-run bench/ort_run.js] [--keep DIR]

- with --ort-run, ONNX Runtime (CPU) runs every case and must give the expected outputs
  (so the expectations written here are ONNX Runtime's), and must refuse the invalid patterns;
- kiln-conformance compiles and runs every case, and checks the reference (--reference);
- the `kiln` CLI compiles each case and `kiln run` writes outputs that must equal them;
- patterns Kiln refuses (invalid RE2, or syntax it does not take) must fail `kiln compile`
  with an error naming the node, the op and the byte in the pattern.

StringSplit follows ONNX Runtime where the spec leaves room: "" has no pieces, an empty
delimiter splits on runs of ' ' only, and the rest after maxsplit splits loses its trailing
spaces.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 20


def strings(*texts, shape=None):
    a = np.array(texts, dtype=object)
    return a.reshape(shape) if shape is not None else a


def tensor_proto(name, a):
    if a.dtype == object:
        return helper.make_tensor(name, TensorProto.STRING, a.shape, [t.encode("utf-8") for t in a.flatten()])
    from onnx import numpy_helper
    return numpy_helper.from_array(a, name)


def elem_type(a):
    return TensorProto.STRING if a.dtype == object else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype]


def save_case(root, name, nodes, inputs, outputs, opset=OPSET, symbolic=False):
    """inputs/outputs: [(name, array)]; string arrays are numpy object arrays of str. With
    `symbolic` the inputs' dims are declared as names (d0_x, d1_x, ...): run-time shapes."""
    def dims(n, a):
        return [f"d{i}_{n}" for i in range(a.ndim)] if symbolic else a.shape

    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, elem_type(a), dims(n, a)) for n, a in inputs],
                              [helper.make_tensor_value_info(n, elem_type(a), None) for n, a in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    data = os.path.join(root, name, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(root, name, "model.onnx"))
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, (n, a) in enumerate(tensors):
            with open(os.path.join(data, f"{kind}_{i}.pb"), "wb") as f:
                f.write(tensor_proto(n, a).SerializeToString())
    return name


def split_like_ort(text, delimiter, maxsplit):
    """One text's pieces as ONNX Runtime's StringSplit makes them (see the module doc)."""
    if text == "":
        return []
    if delimiter:
        return text.split(delimiter, maxsplit if maxsplit is not None and maxsplit >= 0 else -1)
    pieces = []
    rest = text.lstrip(" ")
    while rest:
        if maxsplit is not None and maxsplit >= 0 and len(pieces) == maxsplit:
            pieces.append(rest.rstrip(" "))
            break
        piece, _, rest = rest.partition(" ")
        pieces.append(piece)
        rest = rest.lstrip(" ")
    return pieces


def split_outputs(x, delimiter, maxsplit):
    pieces = [split_like_ort(t, delimiter, maxsplit) for t in x.flatten()]
    width = max((len(p) for p in pieces), default=0)
    y = np.array([p + [""] * (width - len(p)) for p in pieces], dtype=object).reshape(x.shape + (width,))
    z = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
    return y, z


TEXTS = strings("hello world", "", "  a  b  ", "naïve café", "日本語 テキスト", "tab\tsep  x", "a,b,,c,", ",")

# (name, pattern, [(text, full match?)]); the expectations are RE2's (ONNX Runtime checks them).
REGEX_CASES = [
    ("literal", "abc", [("abc", True), ("abcd", False), ("", False), ("ABC", False)]),
    ("empty_pattern", "", [("", True), ("a", False)]),
    ("dot_star", "a.*z", [("az", True), ("a\u00e9\u65e5z", True), ("a\nz", False), ("za", False)]),
    ("dot_all", "(?s)a.z", [("a\nz", True), ("abz", True), ("az", False)]),
    ("classes", "[a-c]+[^0-9x]?[[:digit:]]{2}", [("abc!12", True), ("a12", True), ("ax12", False),
                                                  ("abc9", False), ("cc\u00e912", True)]),
    ("perl_classes", r"\w+\s\d*\S", [("ab_9 12x", True), ("x y", True), ("x\ty", True), ("x\u00a0y", False),
                                      ("\u00e9 1", False)]),
    ("negated_perl", r"\W\D\S", [("!a!", True), ("a!!", False), ("! !", True), ("!1!", False), ("\u00e9xy", True)]),
    ("email", r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}", [("john.doe@example.com", True),
                                                         ("jane@sub.example.co", True),
                                                         ("not-an-email", False), ("a@b.c", False),
                                                         ("x@y.museum", False)]),
    ("alternation_groups", r"(?:foo|ba(r|z))+(?P<tail>!)?", [("foo", True), ("barbazfoo!", True), ("ba", False),
                                                             ("foobar!!", False), ("", False)]),
    ("counted", r"x{2}y{1,3}z{2,}", [("xxyzz", True), ("xxyyyzzzz", True), ("xyzz", False), ("xxyyyyzz", False),
                                     ("xxyz", False)]),
    ("lazy", r"a+?b*?c??", [("aaabbc", True), ("a", True), ("b", False)]),
    ("case_insensitive", r"(?i)hello [a-z]+", [("HeLLo World", True), ("hello \u212aelvin", True),
                                               ("HELLO  x", False), ("hello \u017ftar", True)]),
    ("scoped_flags", r"a(?i:b)c", [("aBc", True), ("abc", True), ("abC", False), ("ABc", False)]),
    ("anchors", r"^ab$", [("ab", True), ("ab\n", False)]),
    ("inner_anchors", r"a$b?|b?^c|x\By|x\b.", [("a", True), ("ab", False), ("c", True), ("bc", False),
                                                ("xy", True), ("x!", True), ("x", False)]),
    ("multiline", r"(?m)a$\n^b", [("a\nb", True), ("ab", False)]),
    ("word_boundary", r"\bfoo\b.*", [("foo bar", True), ("foobar", False), ("foo", True)]),
    ("escapes", r"\.\*\x41\x{e9}\t\\\101\Qa+b\E", [(".*A\u00e9\t\\Aa+b", True), (".*A\u00e9\t\\Aaab", False)]),
    ("utf8_literal", "日本.{2}", [("日本語だ", True), ("日本語", False), ("日本ab", True)]),
    ("nested_repeat", "(a*)*b|(a|aa)+c", [("aaaab", True), ("b", True), ("aaaaaaaac", True), ("aaaa", False),
                                          ("a" * 40, False)]),
]

# (name, pattern, byte the error names, Kiln's words) for patterns kiln compile must refuse.
# The first group is invalid RE2 (ONNX Runtime refuses them too); the rest is RE2 Kiln does
# not take.
BAD_PATTERNS = [
    ("missing_paren", "(ab", 0, "missing )", True),
    ("unexpected_paren", "ab)", 2, "unexpected )", True),
    ("missing_bracket", "x[ab", 1, "missing ]", True),
    ("repeat_no_argument", "*a", 0, "missing argument", True),
    ("stacked_repeat", "a**", 2, "bad repetition operator", True),
    ("count_too_big", "a{1001}", 1, "bad repetition operator", True),
    ("bad_range", "[z-a]", 1, "invalid character class range", True),
    ("lookahead", "a(?=b)", 1, "invalid or unsupported Perl syntax", True),
    ("backreference", r"(a)\1", 3, "invalid escape sequence", True),
    ("unicode_class", r"\pL+", 0, "not supported", False),
    ("fold_non_ascii", "(?i)caf\u00e9", 7, "not supported", False),
]


# Random patterns: atoms, repeats and groups of the RE2 syntax Kiln takes, odd corners included
# ('{' as a literal, ']' and '-' first or last in a class, octal and \x{} escapes, flags).
RANDOM_ATOMS = ["a", "b", "A", "K", "k", "s", " ", r"\n", ".", "[ab]", "[^a]", "[a-z]", r"[^\s]", r"\w", r"\W", r"\d",
                r"\D", r"\s", r"\S", "^", "$", r"\b", r"\B", r"\x41", r"\x{e9}", "[[:upper:]]", "[[:^alpha:]]",
                "[[:punct:]]", r"\.", "_", "1", r"\_", r"\-", "[]a]", "[a-]", "[^-a]", r"[\d-z]", "a{", "a{,2}", "{",
                "}", "]", r"\Qa.\E", r"\101", r"\t", "[[:space:]]", "[[:xdigit:]]", r"[\x00-\x{10FFFF}]", r"\A",
                r"\z", "-", "[--a]", "[a-b-c]", "(?i)", "(?-i)", "(?s)", "(?m)", "(?i-s)", "(?U)", "é", "日", "[é-ÿ]",
                "[^é]"]
RANDOM_REPEATS = ["*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}", "*?", "+?", "??", "{2,3}?", "{0}", "{0,}"]
RANDOM_PIECES = ["a", "b", "A", "B", "K", "k", " ", "\n", "\t", "1", "_", ".", "é", "\u212a", "\u017f", "s", "-", "{",
                 "}", "]", "\x0b", "日", "\u00a0", "!", "a{,2}", "a."]


def random_pattern(rng, depth=0):
    atoms = []
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.15 and depth < 3:
            opener = rng.choice(["(", "(?:", "(?i:", f"(?P<g{rng.randint(0, 10**6)}>", "(?s:"])
            atom = opener + random_pattern(rng, depth + 1) + ")"
        else:
            atom = rng.choice(RANDOM_ATOMS)
        flags_only = atom.startswith("(?") and atom.endswith(")") and ":" not in atom and "<" not in atom
        if not flags_only and rng.random() < 0.3:
            atom += rng.choice(RANDOM_REPEATS)
        atoms.append(atom)
    pattern = "".join(atoms)
    return pattern + "|" + random_pattern(rng, depth + 1) if rng.random() < 0.2 else pattern


def random_regex_case(root, ort_run, count=60):
    """One model of `count` RegexFullMatch nodes with random patterns (none that Kiln refuses:
    no non-ASCII under (?i)) over 40 random texts; the expected outputs are ONNX Runtime's."""
    import random
    rng = random.Random(20261126)
    patterns = []
    while len(patterns) < count:
        pattern = random_pattern(rng)
        if not ("(?i" in pattern and any(ord(c) > 127 for c in pattern)):
            patterns.append(pattern)
    texts = strings(*["".join(rng.choice(RANDOM_PIECES) for _ in range(rng.randint(0, 5))) for _ in range(40)])
    nodes = [helper.make_node("RegexFullMatch", ["x"], [f"y{i}"], pattern=p) for i, p in enumerate(patterns)]
    name = save_case(root, "regex_full_match_random", nodes, [("x", texts)],
                     [(f"y{i}", np.zeros(texts.shape, bool)) for i in range(count)])
    ort_dir = os.path.join(root, "..", "work", name + ".expected")
    ran = run_ort(ort_run, root, name, ort_dir)
    if ran.returncode != 0:
        sys.exit(f"{name}: ONNX Runtime: {ran.stderr.strip()}")
    for i in range(count):
        shutil.copy(os.path.join(ort_dir, f"output_{i}.pb"), os.path.join(root, name, "test_data_set_0"))
    return name


def make_cases(root):
    cases = []
    a = strings("x", "", "日本", "é", shape=(2, 2))
    b = strings("1", "-suffix", shape=(2, 1))
    cases.append(save_case(root, "string_concat_broadcast", [helper.make_node("StringConcat", ["a", "b"], ["y"])],
                           [("a", a), ("b", b)], [("y", np.char.add(a.astype(str), b.astype(str)).astype(object))]))
    c = strings("abc", "", "ü", shape=(3,))
    d = strings("", shape=(1,))
    cases.append(save_case(root, "string_concat_empty", [helper.make_node("StringConcat", ["c", "d"], ["y"])],
                           [("c", c), ("d", d)], [("y", c.copy())]))
    e = strings("a", "b", "", "naïve", "x", "abc", shape=(2, 3))
    f = strings("a", "B", "", shape=(3,))
    cases.append(save_case(root, "string_equal_broadcast", [helper.make_node("Equal", ["e", "f"], ["y"])],
                           [("e", e), ("f", f)], [("y", (e.astype(str) == f.astype(str)))], opset=19))
    g = strings("naïve", "naive", "日本", "日本語", "", "a\tb")
    h = strings("naïve", "naïve", "日本", "日本", "", "a b")
    cases.append(save_case(root, "string_equal_utf8", [helper.make_node("Equal", ["g", "h"], ["y"])],
                           [("g", g), ("h", h)], [("y", g.astype(str) == h.astype(str))], opset=19))
    for name, delimiter, maxsplit in (("whitespace", None, None), ("empty_delimiter", "", None),
                                      ("comma", ",", None), ("comma_maxsplit_1", ",", 1),
                                      ("whitespace_maxsplit_1", None, 1), ("maxsplit_0", None, 0),
                                      ("multibyte_delimiter", "語 ", None), ("long_delimiter", "  ", 2),
                                      ("comma_maxsplit_negative", ",", -1)):
        attrs = {k: v for k, v in (("delimiter", delimiter), ("maxsplit", maxsplit)) if v is not None}
        y, z = split_outputs(TEXTS, delimiter, maxsplit)
        cases.append(save_case(root, f"string_split_{name}", [helper.make_node("StringSplit", ["x"], ["y", "z"],
                                                                               **attrs)],
                               [("x", TEXTS)], [("y", y), ("z", z)]))
    grid = strings("a b", "c", "", "d e f", shape=(2, 2))
    y, z = split_outputs(grid, None, None)
    cases.append(save_case(root, "string_split_2d", [helper.make_node("StringSplit", ["x"], ["y", "z"])],
                           [("x", grid)], [("y", y), ("z", z)]))
    empties = strings("", "", "")
    y, z = split_outputs(empties, ",", None)
    cases.append(save_case(root, "string_split_all_empty", [helper.make_node("StringSplit", ["x"], ["y", "z"],
                                                                             delimiter=",")],
                           [("x", empties)], [("y", y), ("z", z)]))
    nothing = np.zeros((0,), dtype=object)
    y, z = split_outputs(nothing, None, None)
    cases.append(save_case(root, "string_split_empty_tensor", [helper.make_node("StringSplit", ["x"], ["y", "z"])],
                           [("x", nothing)], [("y", y), ("z", z)]))
    wide, row = np.zeros((0, 3), dtype=object), strings("a", "b", "c")
    cases.append(save_case(root, "string_concat_empty_tensor", [helper.make_node("StringConcat", ["w", "r"], ["y"])],
                           [("w", wide), ("r", row)], [("y", np.zeros((0, 3), dtype=object))]))
    # StringSplit's pieces go on through StringConcat and Equal: a run-time last dim downstream.
    words = strings("red green", "blue", "green red")
    pieces, _ = split_outputs(words, None, None)
    joined = np.char.add(pieces.astype(str), "!").astype(object)
    cases.append(save_case(root, "string_split_chain", [
        helper.make_node("StringSplit", ["x"], ["p", "n"]),
        helper.make_node("StringConcat", ["p", "bang"], ["y"]),
        helper.make_node("Equal", ["y", "probe"], ["hit"]),
        helper.make_node("RegexFullMatch", ["p"], ["colour"], pattern="(?:red|green|blue)")],
        [("x", words), ("bang", strings("!")), ("probe", strings("red!"))],
        [("y", joined), ("hit", joined.astype(str) == "red!"),
         ("colour", np.isin(pieces.astype(str), ["red", "green", "blue"]))]))
    # Every input's dims known only at run time: the broadcast and same-shape rules.
    s, t = strings("ab", "a1", "", "xyz", shape=(4, 1)), strings("1", "", "b", shape=(3,))
    st = np.char.add(s.astype(str), t.astype(str))
    cases.append(save_case(root, "string_ops_symbolic_dims", [
        helper.make_node("StringConcat", ["s", "t"], ["y"]),
        helper.make_node("Equal", ["y", "t"], ["same"]),
        helper.make_node("RegexFullMatch", ["y"], ["letters"], pattern="[a-z]+")],
        [("s", s), ("t", t)],
        [("y", st.astype(object)), ("same", st == t.astype(str)),
         ("letters", np.vectorize(lambda v: v.isalpha() and v.isascii() and v.islower())(st))], symbolic=True))
    for name, pattern, examples in REGEX_CASES:
        x = strings(*[t for t, _ in examples])
        cases.append(save_case(root, f"regex_full_match_{name}",
                               [helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", x)],
                               [("y", np.array([m for _, m in examples], bool))]))
    return cases


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    if t.data_type == TensorProto.STRING:
        return list(t.dims), [s.decode("utf-8", "replace") for s in t.string_data]
    from onnx import numpy_helper
    return list(t.dims), numpy_helper.to_array(t).flatten().tolist()


def case_files(root, case, kind):
    data = os.path.join(root, case, "test_data_set_0")
    return sorted((f for f in os.listdir(data) if f.startswith(kind)), key=lambda f: int(f.split("_")[1][:-3]))


def same_outputs(root, case, out_dir, who):
    """Whether out_dir's output_K.pb equal the case's expected outputs (dims and values)."""
    data = os.path.join(root, case, "test_data_set_0")
    ok = True
    for f in case_files(root, case, "output"):
        want, got = read_pb(os.path.join(data, f)), read_pb(os.path.join(out_dir, f))
        if want != got:
            print(f"FAIL {case}: {who} {f}: got {got}, want {want}", flush=True)
            ok = False
    return ok


def run_ort(ort_run, root, case, out_dir):
    data = os.path.join(root, case, "test_data_set_0")
    args = ["node", ort_run, os.path.join(root, case, "model.onnx"), "--output-dir", out_dir]
    for f in case_files(root, case, "input"):
        args += ["--input", os.path.join(data, f)]
    return subprocess.run(args, capture_output=True, text=True)


def run_kiln(kiln, root, case, work):
    """kiln compile + kiln run on the case's inputs; returns the output directory or None."""
    data = os.path.join(root, case, "test_data_set_0")
    artifact = os.path.join(work, case + ".so")
    built = subprocess.run([kiln, "compile", os.path.join(root, case, "model.onnx"), "-o", artifact],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"FAIL {case}: kiln compile: {built.stderr.strip()}", flush=True)
        return None
    model = onnx.load(os.path.join(root, case, "model.onnx"))
    args = [kiln, "run", artifact, "--output-dir", os.path.join(work, case + ".kiln")]
    for graph_input, f in zip(model.graph.input, case_files(root, case, "input")):
        args += ["--input", f"{graph_input.name}={os.path.join(data, f)}"]
    ran = subprocess.run(args, capture_output=True, text=True)
    if ran.returncode != 0:
        print(f"FAIL {case}: kiln run: {ran.stderr.strip()}", flush=True)
        return None
    return os.path.join(work, case + ".kiln")


def check_refusals(kiln, ort_run, work):
    """Each bad pattern: kiln compile fails naming the node, the op and the byte; ONNX Runtime
    refuses the invalid ones too."""
    failed = []
    for name, pattern, byte, words, invalid_re2 in BAD_PATTERNS:
        case = f"regex_refused_{name}"
        save_case(work, case, [helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern, name="match")],
                  [("x", strings("a"))], [("y", np.array([False]))])
        built = subprocess.run([kiln, "compile", os.path.join(work, case, "model.onnx"), "-o",
                                os.path.join(work, case + ".so")], capture_output=True, text=True)
        message = built.stderr
        expected = ["node 'match' (RegexFullMatch, opset 20)", f"at byte {byte}:", words]
        if built.returncode == 0 or not all(part in message for part in expected):
            print(f"FAIL {case}: kiln compile should refuse pattern {pattern!r} with {expected}; "
                  f"exit {built.returncode}: {message.strip()}", flush=True)
            failed.append(case)
            continue
        print(f"ok   {case}: {message.strip().splitlines()[-1]}", flush=True)
        if ort_run and invalid_re2 and run_ort(ort_run, work, case, os.path.join(work, case + ".ort")).returncode == 0:
            print(f"FAIL {case}: ONNX Runtime accepts {pattern!r}, which this test calls invalid RE2", flush=True)
            failed.append(case)
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("conformance", help="the kiln-conformance binary")
    parser.add_argument("--kiln", required=True, help="the kiln CLI")
    parser.add_argument("--ort-run", help="bench/ort_run.js: hold the expectations to ONNX Runtime's outputs")
    parser.add_argument("--keep", help="write the cases here and keep them")
    args = parser.parse_args()
    top = args.keep or tempfile.mkdtemp(prefix="kiln-string-models-")
    if args.keep:
        shutil.rmtree(top, ignore_errors=True)
    root, work = os.path.join(top, "cases"), os.path.join(top, "work")  # kiln-conformance reads all of root
    os.makedirs(root)
    os.makedirs(work)
    try:
        cases = make_cases(root)
        if args.ort_run:  # random patterns, ONNX Runtime's answers expected
            cases.append(random_regex_case(root, args.ort_run))
        failed = []
        for case in cases:
            if args.ort_run:
                ran = run_ort(args.ort_run, root, case, os.path.join(work, case + ".ort"))
                if ran.returncode != 0:
                    print(f"FAIL {case}: ONNX Runtime: {ran.stderr.strip()}", flush=True)
                    failed.append(case)
                elif not same_outputs(root, case, os.path.join(work, case + ".ort"), "ONNX Runtime"):
                    failed.append(case)
            out_dir = run_kiln(args.kiln, root, case, work)
            if out_dir is None or not same_outputs(root, case, out_dir, "kiln run"):
                failed.append(case)
            else:
                print(f"ok   {case}: kiln run{' and ONNX Runtime' if args.ort_run else ''}", flush=True)
        failed += check_refusals(args.kiln, args.ort_run, work)
        pass_list = os.path.join(work, "pass_list.txt")
        with open(pass_list, "w") as f:
            f.write("\n".join(cases) + "\n")
        for mode in ([], ["--reference"]):
            run = subprocess.run([args.conformance, *mode, "--data", root, "--pass-list", pass_list, "--verbose"],
                                 timeout=300)
            if run.returncode != 0:
                failed.append("kiln-conformance " + " ".join(mode))
        if failed:
            print("FAILED: " + ", ".join(sorted(set(failed))), flush=True)
            return 1
        print(f"all {len(cases)} cases and {len(BAD_PATTERNS)} refusals pass", flush=True)
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
