# 1,000,000 report lines: 900,000 payments and 100,000 refunds on 1 March 2026.
import datetime, json, sys
base = datetime.datetime(2026, 3, 1, tzinfo=datetime.timezone.utc)
def at(ms):
    return (base + datetime.timedelta(milliseconds=ms)).isoformat().replace('+00:00', 'Z')
with open(sys.argv[1], 'w') as out:
    for i in range(900_000):
        out.write(json.dumps({"payment_id": f"pay_{i}", "kind": "payment", "amount_minor": 1000 + i % 5000,
                              "currency": "EUR", "at": at(i * 86), "reference": f"ch_{i}"}, separators=(',', ':')) + "\n")
    for j in range(100_000):
        i = j * 9
        out.write(json.dumps({"payment_id": f"pay_{i}", "kind": "refund", "amount_minor": 100 + j % 50,
                              "currency": "EUR", "at": at(i * 86 + 1000), "reference": f"re_{j}"}, separators=(',', ':')) + "\n")
