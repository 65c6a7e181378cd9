#!/usr/bin/env bash
# mlxrt tokenize on the small hand-made tokenizer (ids from HF tokenizers in small-expected.txt).
set -u
MLXRT=$1
TOK=tests/fixtures/tokenizer/small-a.json
fail=0
check() { # name expected actual
  if [ "$2" != "$3" ]; then echo "FAIL $1: expected [$2] got [$3]"; fail=1; else echo "ok $1"; fi
}
check ids "2,310,315,1" "$("$MLXRT" tokenize -m "$TOK" -p "hello world" --ids)"
check no-bos "310,315" "$("$MLXRT" tokenize -m "$TOK" -p "hello world" --ids --no-bos)"
check stdin "310,315" "$(printf 'hello world' | "$MLXRT" tokenize -m "$TOK" --ids --no-bos)"
check decode "<bos>hello world<eos>" "$("$MLXRT" tokenize -m "$TOK" --decode 2,310,315,1)"
check decode-skip "hello world" "$("$MLXRT" tokenize -m "$TOK" --decode "2 310 315 1" --skip-special)"
check listing "$(printf '      2  %s\n    310  %s' "'<bos>'" "'hello'")" \
  "$("$MLXRT" tokenize -m "$TOK" -p hello | head -2)"
# bad input: one line on stderr, non-zero exit
for args in "-m /nonexistent -p x" "-p x" "-m $TOK --decode 1,zz" "-m $TOK --decode 99999" \
            "-m $TOK -p" "-m $TOK --bogus" "-m $TOK -f /nonexistent"; do
  # shellcheck disable=SC2086
  err=$("$MLXRT" tokenize $args 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then
    echo "FAIL bad input '$args': rc=$rc stderr=[$err]"; fail=1
  else echo "ok bad input '$args': $err"; fi
done
exit $fail
