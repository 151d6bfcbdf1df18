# The change under test: ledger lines get a currency suffix.
import sys

from skillstate.cli import main
from skillstate.eval.families import records

original = records.ledger_line
records.ledger_line = lambda i, amount: original(i, amount) + " EUR"
main(["eval", "--replay", *sys.argv[1:]])
