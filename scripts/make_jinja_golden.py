#!/usr/bin/env python3
"""Writes tests/jinja_golden.h: focused Jinja cases rendered by Python jinja2 in the environment
Hugging Face transformers renders chat templates with (its own _compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loop controls, its tojson,
raise_exception, strftime_now, dict, namespace). tests/test_jinja.c checks the C interpreter
against them. The clock is fixed (1700000000 s, TZ=UTC) for strftime_now.

Usage: TZ=UTC $(bash scripts/venv.sh) scripts/make_jinja_golden.py > tests/jinja_golden.h"""
import datetime
import json
import os
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

NOW = 1700000000


class FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.fromtimestamp(NOW, tz)


ctu.datetime = FixedClock

CTX = {
    "s": "Hello, World", "n": 7, "f": 2.5, "neg": -3, "t": True, "z": None, "e": "",
    "l": [3, 1, 2], "words": ["b", "A", "c", "a"], "d": {"b": 1, "a": [1, 2], "c": {"x": None}},
    "u": "h\u00e9llo w\u00f6rld \u2603", "msgs": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "tool_calls": [
            {"function": {"name": "f", "arguments": {"a": 1, "b": "x"}}}]},
        {"role": "user", "content": "bye"}],
    "items": [{"name": "x", "v": 2}, {"name": "Y", "v": 1}, {"name": "z"}],
}

# (name, template, context or None for CTX)
CASES = [
    # whitespace control: trim_blocks, lstrip_blocks, -, +, comments, raw, trailing newline
    ("trim_blocks", "{% if t %}\nyes\n{% endif %}\nend\n", None),
    ("lstrip_blocks", "a\n    {% if t %}\n    b\n    {% endif %}\nc", None),
    ("minus", "a   {{- s -}}   b\n  {%- if t -%}  c  {%- endif -%}  d", None),
    ("plus", "a\n  {%+ if t %}b{% endif +%}\nc", None),
    ("comments", "a\n  {# note #}\nb {#- x -#} c\n{# multi\nline #}d", None),
    ("raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", None),
    ("crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc\r\n", None),
    ("var_no_trim", "{{ n }}\nx\n", None),
    ("lstrip_inline", "x {% if t %}y{% endif %} z\n  {% if t %}w{% endif %}", None),
    # str() of values
    ("str_scalars", "{{ z }}|{{ t }}|{{ false }}|{{ n }}|{{ f }}|{{ 1.0 }}|{{ 1e20 }}|{{ 1e-5 }}|"
     "{{ 0.1 + 0.2 }}|{{ -0.0 }}|{{ 1/3 }}|{{ 2**62 // 2**40 }}|{{ 100000000000000000.0 }}", None),
    ("str_containers", "{{ l }}|{{ d }}|{{ (1,) }}|{{ (1, 'a') }}|{{ [] }}|{{ {} }}|"
     "{{ ['it\\'s', \"q\\\"\", 'b\\\\s', 'n\\nl', none, true, 1.5] }}", None),
    ("str_unicode_repr", "{{ [u, '\\x00\\t\\u200b\\xa0'] }}", None),
    ("undefined", "[{{ nothing }}][{{ d.missing }}][{{ d['missing'] }}][{{ l[10] }}]"
     "[{{ nothing is defined }}][{{ (nothing or 'dflt') }}][{{ nothing|length }}]", None),
    # arithmetic
    ("arith_int", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} "
     "{{ 7 / 2 }} {{ 6 / 3 }} {{ 3 - 5 }} {{ n * 3 }} {{ 2 ** -1 }}", None),
    ("arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ f * 2 }} {{ f + 1 }} {{ 1.1 * 3 }} {{ 10 / 4 }}", None),
    ("arith_str_list", "{{ 'ab' * 3 }}|{{ 3 * '-' }}|{{ [1] * 2 }}|{{ l + [9] }}|{{ 'a' ~ 1 ~ none ~ t }}"
     "|{{ 'x' + s }}|{{ -neg }}|{{ +f }}", None),
    ("bool_arith", "{{ true + 1 }} {{ t * 3 }} {{ true == 1 }} {{ 1 == 1.0 }} {{ false < true }}", None),
    # comparisons and logic
    ("compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'ab' in s }} "
     "{{ 'He' in s }} {{ 2 in l }} {{ 'a' in d }} {{ 'q' not in d }} {{ none == none }} {{ l == [3, 1, 2] }}", None),
    ("logic_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ e or none }}|{{ not l }}|{{ n if t else 'no' }}|"
     "{{ 'no' if z }}|{{ z is none and e == '' }}", None),
    # loops
    ("loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", None),
    ("loop_prev_next", "{% for x in l %}[{{ loop.previtem }},{{ loop.nextitem }}]{% endfor %}"
     "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}", None),
    ("loop_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %}|"
     "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}|"
     "{% for x in l if x > 5 %}{{ x }}{% else %}none{% endfor %}", None),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|"
     "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'h\u00e9' %}[{{ c }}]{% endfor %}|"
     "{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}", None),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
     "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", None),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}"
     "{% endfor %}{{ loop.index }} {% endfor %}", None),
    ("range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", None),
    # scoping
    ("scope_loop_set", "{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", None),
    ("scope_namespace", "{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + i %}"
     "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }} {{ ns.s }}", None),
    ("scope_if_set", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}", None),
    ("set_block", "{% set b %}  in{{ n }}  {% endset %}[{{ b }}]{% set c | trim | upper %} x {% endset %}[{{ c }}]", None),
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set t2 = 1, 2 %}{{ t2 }}", None),
    ("with_block", "{% with a = 3, b = 4 %}{{ a * b }}{% endwith %}[{{ a }}]", None),
    ("filter_block", "{% filter upper %}abc {{ s }}{% endfilter %}|{% filter trim %}  x  {% endfilter %}", None),
    ("generation_block", "a{% generation %}b{{ n }}{% endgeneration %}c", None),
    # macros
    ("macro_defaults", "{% macro m(a, b=2, c='x') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}"
     "{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c='y') }}|{{ m(a=0, b=none) }}|{{ m() }}", None),
    ("macro_recursive", "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * (fact(k - 1)|int) }}{% endif %}"
     "{% endmacro %}{{ fact(6) }}", None),
    ("macro_sees_globals", "{% macro m() %}{{ n }}{{ x }}{% endmacro %}{% set x = 'X' %}{{ m() }}", None),
    ("macro_returns_str", "{% macro m() %}  a  {% endmacro %}[{{ m() }}][{{ m()|trim }}][{{ m() is string }}]", None),
    # subscripts and slices
    ("slices", "{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[-1] }} {{ s[:5] }} {{ s[-5:] }} {{ s[::2] }} "
     "{{ u[1:4] }} {{ u[-1] }} {{ l[5:] }} {{ s[2:2] }} {{ l[::2] }}", None),
    ("attr_vs_item", "{{ d.b }} {{ d['a'][1] }} {{ d.a.0 }} {{ msgs[2].tool_calls[0].function.name }} "
     "{{ {'items': 1}['items'] }} {{ ({'items': 1}.items is defined) }}", None),
    # filters
    ("f_string_case", "{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD-x(y)'|title }}|{{ 'hELLO'|capitalize }}|"
     "{{ u|upper }}|{{ '  pad  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 123|string }}", None),
    ("f_length_first_last", "{{ l|length }} {{ s|length }} {{ u|count }} {{ d|length }} {{ l|first }} "
     "{{ l|last }} {{ s|first }} {{ []|first }}", None),
    ("f_default", "{{ nothing|default('d') }} {{ e|default('d') }} {{ e|default('d', true) }} "
     "{{ z|d('n') }} {{ nothing|default }}|", None),
    ("f_join_list", "{{ l|join(', ') }} {{ l|join }} {{ items|join('/', attribute='name') }} "
     "{{ 'abc'|list }} {{ d|list }}", None),
    ("f_sort", "{{ words|sort }} {{ words|sort(reverse=true) }} {{ words|sort(case_sensitive=true) }} "
     "{{ items|sort(attribute='name')|map(attribute='name')|list }} {{ l|sort }}", None),
    ("f_dictsort", "{{ d|dictsort }} {{ {'b': 2, 'A': 1, 'a': 0}|dictsort }} "
     "{{ {'b': 2, 'a': 3}|dictsort(by='value') }} {{ {'b': 2, 'a': 3}|dictsort(reverse=true) }}", None),
    ("f_map_select", "{{ words|map('upper')|list }} {{ items|map(attribute='v', default=0)|list }} "
     "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} "
     "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }} "
     "{{ msgs|rejectattr('role', 'in', ['user', 'system'])|list|length }} "
     "{{ items|selectattr('v')|map(attribute='name')|list }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }}", None),
    ("f_generators", "{% if []|select %}gen-true{% endif %} {{ l|map('string')|join }} "
     "{% set g = l|select %}{{ g|list }}{{ g|list }} {{ z|map('upper')|list }}", None),
    ("f_unique_minmax", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ l|max }} "
     "{{ l|min }} {{ words|max }} {{ words|min }} {{ []|max }}|{{ l|sum }} {{ items|sum(attribute='v') }}", None),
    ("f_numbers", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(9) }} {{ 3.9|int }} {{ '2.5'|float }} "
     "{{ 'a'|float }} {{ 7|float }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} "
     "{{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 5|round }} {{ ' 1_000 '|int }}", None),
    ("f_replace_indent", "{{ s|replace('l', 'L') }} {{ s|replace('l', '', 2) }}|{{ 'a\\nb\\n\\nc'|indent }}|"
     "{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(1, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", None),
    ("f_misc", "{{ l|reverse|list }} {{ s|reverse }} {{ l|batch(2)|list }} {{ l|batch(2, 0)|list }} "
     "{{ 'a b  c\\nd'|wordcount }} {{ '<a href=\"x\">&\\''|e }} {{ d|items|list }} {{ d|attr('b') }}|", None),
    ("f_markup", "{{ 'a'|safe + '<b>' }} {{ '<x>' + ('&'|safe) }} {{ '<'|safe ~ '>' }} {{ ('<'|safe) * 2 }} "
     "{{ '<i>'|escape + '<j>' }}", None),
    ("f_tojson", "{{ d|tojson }}|{{ u|tojson }}|{{ [1.0, 2.5e-7, 1e22, none, true, 'q\"\\\\\\n\\t\\x01']|tojson }}|"
     "{{ d|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|"
     "{{ u|tojson(ensure_ascii=true) }}|{{ {1: 'i', none: 0, true: 1, 2.5: 'f'}|tojson }}|{{ (1, 2)|tojson }}|"
     "{{ {}|tojson(indent=4) }}|{{ [[]]|tojson(indent='\\t') }}|{{ '\U0001F600'|tojson(ensure_ascii=true) }}", None),
    # tests
    ("tests_types", "{{ s is string }}{{ n is number }}{{ t is number }}{{ f is float }}{{ n is integer }}"
     "{{ t is integer }}{{ t is boolean }}{{ d is mapping }}{{ l is mapping }}{{ l is sequence }}"
     "{{ s is sequence }}{{ d is sequence }}{{ n is iterable }}{{ d is iterable }}{{ z is none }}"
     "{{ t is true }}{{ 1 is true }}{{ false is false }}{{ range is callable }}{{ s is callable }}", None),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}"
     "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 'aB' is lower }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}"
     "{{ 1 is lt 2 }}{{ 2 is ge 3 }}{{ 'a' is in 'cat' }}{{ 2 is in l }}{{ n is not none }}"
     "{{ nothing is undefined }}{{ z is sameas none }}{{ 1 is equalto(1) }}", None),
    # str methods
    ("str_methods", "{{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|"
     "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|"
     "{{ ' a  b '.rsplit(none, 1) }}|{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }}|{{ s.upper() }}{{ s.lower() }}|"
     "{{ \"they're bill's x1y\".title() }}|{{ 'hELLO wORLD'.capitalize() }}|{{ s.replace('o', '0') }}|"
     "{{ s.replace('o', '0', 1) }}|{{ s.find('o') }}{{ s.rfind('o') }}{{ s.find('q') }}{{ u.find('w') }}|"
     "{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {}!'.format('x', 2) }}|{{ '{0}{1}{0}'.format('a', 'b') }}|"
     "{{ '{a}-{b}'.format(a=1, b=none) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}"
     "{{ '  '.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}|{{ '7'.zfill(3) }}|{{ 'abc'.index('c') }}", None),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('b') }} {{ d.get('q') }} "
     "{{ d.get('q', 'dflt') }} {{ d.items()|list }} {{ l.index(1) }} {{ l.count(3) }}", None),
    ("globals", "{{ dict(a=1, b='x') }} {{ dict({'z': 1}, y=2) }} {{ namespace(a=1).a }} "
     "{{ strftime_now('%Y-%m-%d %H:%M %B %A %d %b') }}", None),
    ("literals", "{{ 'a' 'b' }} {{ \"dq\" }} {{ 1_000 }} {{ 0.5e1 }} {{ [1, [2, (3,)], {'k': 'v'}] }} "
     "{{ {'a': 1, 'a': 2} }} {{ True }}{{ None }}{{ False }} {{ '\\u00e9\\x41\\101' }}", None),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} "
     "{{ 1 + 2|string }}{{ 'a' ~ 1 + 2 }} {{ -l|length }} {{ [1,2]|length + 1 }} {{ n > 5 and n < 10 or false }}", None),
    ("chat_like", "{{ bos }}{% for m in msgs %}{% if m.role == 'system' %}{% continue %}{% endif %}"
     "<|{{ m.role }}|>\n{{ m.content | trim }}\n{% if m.tool_calls is defined %}{% for c in m.tool_calls %}"
     "{{ c.function.name }}({{ c.function.arguments | tojson }})\n{% endfor %}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}<|assistant|>\n{% endif %}",
     {"bos": "<s>", "add_generation_prompt": True, "msgs": CTX["msgs"]}),
    # failures in jinja2 too (the C side must fail; messages need not match except raise_exception)
    ("raise", "a{{ raise_exception('Bad role: ' ~ s) }}", None),
    ("err_undefined_attr", "{{ nothing.attr }}", None),
    ("err_type_add", "{{ 1 + 'a' }}", None),
    ("err_unsafe_append", "{% set x = l.append(1) %}", None),
    ("err_div_zero", "{{ 1 // 0 }}", None),
    ("err_gen_length", "{{ l|select|length }}", None),
    ("err_gen_tojson", "{{ l|map('string')|tojson }}", None),
    ("err_unknown_filter", "{{ s|nosuchfilter }}", None),
    ("err_unknown_tag", "{% include 'x.jinja' %}", None),
    ("err_unterminated_if", "{% if t %}x", None),
    ("err_unterminated_var", "{{ s ", None),
    ("err_unterminated_comment", "{# x", None),
    ("err_break_outside_loop", "{% break %}", None),
    ("err_range_big", "{% for i in range(1000000) %}{% endfor %}", None),
    ("err_macro_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", None),
    ("soft_unknown_filter", "{% if false %}{{ s|nosuchfilter }}{% endif %}ok", None),
]


def c_str(s):
    out = ['"']
    for b in s.encode("utf-8"):
        c = chr(b)
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append('\\n"\n    "')
        elif 32 <= b < 127 and c != "?":
            out.append(c)
        else:
            out.append("\\%03o" % b)
    out.append('"')
    return "".join(out)


def main():
    os.environ.setdefault("TZ", "UTC")
    print("/* Generated by scripts/make_jinja_golden.py from Python jinja2 %s in the environment of"
          % jinja2.__version__)
    print(" * Hugging Face transformers %s (trim_blocks, lstrip_blocks, loop controls, its tojson," % transformers.__version__)
    print(" * raise_exception, strftime_now at %d s UTC). Do not edit. */" % NOW)
    print("typedef struct jinja_golden {\n  const char *name, *tmpl, *ctx, *out; /* out: NULL = jinja2 fails */\n  const char *err; /* jinja2's message when it fails */\n} jinja_golden;")
    print("static const jinja_golden JINJA_GOLDEN[] = {")
    for name, tmpl, ctx in CASES:
        ctx = CTX if ctx is None else ctx
        try:
            out, err = ctu._compile_jinja_template(tmpl).render(**ctx), None
        except Exception as e:  # the failure is the expected result
            out, err = None, "%s: %s" % (type(e).__name__, e)
        print("    {%s,\n     %s,\n     %s,\n     %s,\n     %s}," % (
            c_str(name), c_str(tmpl), c_str(json.dumps(ctx, ensure_ascii=False)),
            "NULL" if out is None else c_str(out), "NULL" if err is None else c_str(err)))
    print("};")


if __name__ == "__main__":
    main()
