/* fsize_limit: the files shunt makes grow for itself (its log, its table for shunt stat, the
 * registry, a channel's segment) never kill a program whose RLIMIT_FSIZE is below them: the
 * kernel answers a write or ftruncate past the limit with EFBIG and SIGXFSZ, whose default
 * action kills (OpenSSH's pre-authentication child sets the limit to 0, a shell's `ulimit -f` to
 * anything). Re-executed with SHUNT_LOG=debug and SHUNT_LOG_FILE in the test's directory (the
 * log holds its first line when the limit comes), and SHUNT_STRICT=0: under the limit a new
 * channel cannot be made, and that connection stays on kernel TCP. A connection made before the
 * limit is used, shut down and closed after it; a second one is made, used and closed under it
 * (accelerated mode: on kernel TCP). Every step writes the log or the table. The program's own
 * write past the limit still gets its SIGXFSZ (a handler counts it) and EFBIG. */
#include "check.h"
#include "handoff.h"
#include "net.h"
#include "settings.h"

#include <sys/resource.h>

static volatile sig_atomic_t xfsz;

static void on_xfsz(int sig)
{
	(void)sig;
	xfsz++;
}

static void use_and_close(int c, int s)
{
	xexchange_both(c, s);
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(read(s, (char[1]){ 0 }, 1), ==, 0);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	struct rlimit none = { 0, RLIM_INFINITY };
	int c, s, c2, s2, own;

	test_setting("SHUNT_LOG", "debug");
	test_setting("SHUNT_LOG_FILE", "shunt-fsize.log");
	test_setting("SHUNT_STRICT", "0");

	own = CHECK_OK(open("own-file", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
	CHECK(signal(SIGXFSZ, on_xfsz), !=, SIG_ERR);
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(setrlimit(RLIMIT_FSIZE, &none));

	use_and_close(c, s);
	tcp_pair(AF_INET, &c2, &s2);
	if (test_mode() != TEST_MODE_PLAIN)
		CHECK(accelerated_now(s2), ==, 0);   /* no segment could be made for it */
	use_and_close(c2, s2);

	/* the program's own file: the kernel's answer, and its signal, are the program's */
	CHECK(xfsz, ==, 0);
	CHECK_ERRNO(write(own, "x", 1), EFBIG);
	CHECK(xfsz, ==, 1);
	CHECK_OK(close(own));
	PASS();
}
