//! Special functions PyTorch takes from the Cephes Math Library (Stephen L. Moshier), evaluated in
//! the IR the way its kernels evaluate them: the modified Bessel functions `I0`, `I1`, `K0`, `K1`
//! (plain and exponentially scaled, from Chebyshev expansions summed by Clenshaw's recurrence),
//! `ndtri` (rational approximations of the inverse normal distribution) and `erfcx`.
//!
//! Every branch is computed for every element and the right one selected, so infinities and NaN
//! of a branch an element does not take never reach it. Floats of half precision compute in `f32`;
//! `f32` and `f64` in their own precision, as PyTorch instantiates the templates.

// Cephes publishes its coefficients with 21 digits; they are kept as published, each rounded to
// the nearest `f64` by the compiler as PyTorch's are by its own.
#![allow(clippy::excessive_precision)]

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, UnaryOp, ValueId};

use super::elementwise::{apply_float, tensor};
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// Chebyshev coefficients of `exp(-x) I0(x)` over `[0, 8]`, in `y = x / 2 - 2`.
const I0_A: [f64; 30] = [
    -4.41534164647933937950E-18,
    3.33079451882223809783E-17,
    -2.43127984654795469359E-16,
    1.71539128555513303061E-15,
    -1.16853328779934516808E-14,
    7.67618549860493561688E-14,
    -4.85644678311192946090E-13,
    2.95505266312963983461E-12,
    -1.72682629144155570723E-11,
    9.67580903537323691224E-11,
    -5.18979560163526290666E-10,
    2.65982372468238665035E-9,
    -1.30002500998624804212E-8,
    6.04699502254191894932E-8,
    -2.67079385394061173391E-7,
    1.11738753912010371815E-6,
    -4.41673835845875056359E-6,
    1.64484480707288970893E-5,
    -5.75419501008210370398E-5,
    1.88502885095841655729E-4,
    -5.76375574538582365885E-4,
    1.63947561694133579842E-3,
    -4.32430999505057594430E-3,
    1.05464603945949983183E-2,
    -2.37374148058994688156E-2,
    4.93052842396707084878E-2,
    -9.49010970480476444210E-2,
    1.71620901522208775349E-1,
    -3.04682672343198398683E-1,
    6.76795274409476084995E-1,
];

/// Chebyshev coefficients of `exp(-x) sqrt(x) I0(x)` over `(8, inf)`, in `y = 32 / x - 2`.
const I0_B: [f64; 25] = [
    -7.23318048787475395456E-18,
    -4.83050448594418207126E-18,
    4.46562142029675999901E-17,
    3.46122286769746109310E-17,
    -2.82762398051658348494E-16,
    -3.42548561967721913462E-16,
    1.77256013305652638360E-15,
    3.81168066935262242075E-15,
    -9.55484669882830764870E-15,
    -4.15056934728722208663E-14,
    1.54008621752140982691E-14,
    3.85277838274214270114E-13,
    7.18012445138366623367E-13,
    -1.79417853150680611778E-12,
    -1.32158118404477131188E-11,
    -3.14991652796324136454E-11,
    1.18891471078464383424E-11,
    4.94060238822496958910E-10,
    3.39623202570838634515E-9,
    2.26666899049817806459E-8,
    2.04891858946906374183E-7,
    2.89137052083475648297E-6,
    6.88975834691682398426E-5,
    3.36911647825569408990E-3,
    8.04490411014108831608E-1,
];

/// Chebyshev coefficients of `exp(-x) I1(x) / x` over `[0, 8]`.
const I1_A: [f64; 29] = [
    2.77791411276104639959E-18,
    -2.11142121435816608115E-17,
    1.55363195773620046921E-16,
    -1.10559694773538630805E-15,
    7.60068429473540693410E-15,
    -5.04218550472791168711E-14,
    3.22379336594557470981E-13,
    -1.98397439776494371520E-12,
    1.17361862988909016308E-11,
    -6.66348972350202774223E-11,
    3.62559028155211703701E-10,
    -1.88724975172282928790E-9,
    9.38153738649577178388E-9,
    -4.44505912879632808065E-8,
    2.00329475355213526229E-7,
    -8.56872026469545474066E-7,
    3.47025130813767847674E-6,
    -1.32731636560394358279E-5,
    4.78156510755005422638E-5,
    -1.61760815825896745588E-4,
    5.12285956168575772895E-4,
    -1.51357245063125314899E-3,
    4.15642294431288815669E-3,
    -1.05640848946261981558E-2,
    2.47264490306265168283E-2,
    -5.29459812080949914269E-2,
    1.02643658689847095384E-1,
    -1.76416518357834055153E-1,
    2.52587186443633654823E-1,
];

/// Chebyshev coefficients of `exp(-x) sqrt(x) I1(x)` over `(8, inf)`.
const I1_B: [f64; 25] = [
    7.51729631084210481353E-18,
    4.41434832307170791151E-18,
    -4.65030536848935832153E-17,
    -3.20952592199342395980E-17,
    2.96262899764595013876E-16,
    3.30820231092092828324E-16,
    -1.88035477551078244854E-15,
    -3.81440307243700780478E-15,
    1.04202769841288027642E-14,
    4.27244001671195135429E-14,
    -2.10154184277266431302E-14,
    -4.08355111109219731823E-13,
    -7.19855177624590851209E-13,
    2.03562854414708950722E-12,
    1.41258074366137813316E-11,
    3.25260358301548823856E-11,
    -1.89749581235054123450E-11,
    -5.58974346219658380687E-10,
    -3.83538038596423702205E-9,
    -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,
    -3.88256480887769039346E-6,
    -1.10588938762623716291E-4,
    -9.76109749136146840777E-3,
    7.78576235018280120474E-1,
];

/// Chebyshev coefficients of `K0(x) + log(x / 2) I0(x)` over `[0, 2]`, in `y = x^2 - 2`.
const K0_A: [f64; 10] = [
    1.37446543561352307156E-16,
    4.25981614279661018399E-14,
    1.03496952576338420167E-11,
    1.90451637722020886025E-9,
    2.53479107902614945675E-7,
    2.28621210311945178607E-5,
    1.26461541144692592338E-3,
    3.59799365153615016266E-2,
    3.44289899924628486886E-1,
    -5.35327393233902768720E-1,
];

/// Chebyshev coefficients of `exp(x) sqrt(x) K0(x)` over `(2, inf)`, in `y = 8 / x - 2`.
const K0_B: [f64; 25] = [
    5.30043377268626276149E-18,
    -1.64758043015242134646E-17,
    5.21039150503902756861E-17,
    -1.67823109680541210385E-16,
    5.51205597852431940784E-16,
    -1.84859337734377901440E-15,
    6.34007647740507060557E-15,
    -2.22751332699166985548E-14,
    8.03289077536357521100E-14,
    -2.98009692317273043925E-13,
    1.14034058820847496303E-12,
    -4.51459788337394416547E-12,
    1.85594911495471785253E-11,
    -7.95748924447710747776E-11,
    3.57739728140030116597E-10,
    -1.69753450938905987466E-9,
    8.57403401741422608519E-9,
    -4.66048989768794782956E-8,
    2.76681363944501510342E-7,
    -1.83175552271911948767E-6,
    1.39498137188764993662E-5,
    -1.28495495816278026384E-4,
    1.56988388573005337491E-3,
    -3.14481013119645005427E-2,
    2.44030308206595545468E0,
];

/// Chebyshev coefficients of `x (K1(x) - log(x / 2) I1(x))` over `[0, 2]`.
const K1_A: [f64; 11] = [
    -7.02386347938628759343E-18,
    -2.42744985051936593393E-15,
    -6.66690169419932900609E-13,
    -1.41148839263352776110E-10,
    -2.21338763073472585583E-8,
    -2.43340614156596823496E-6,
    -1.73028895751305206302E-4,
    -6.97572385963986435018E-3,
    -1.22611180822657148235E-1,
    -3.53155960776544875667E-1,
    1.52530022733894777053E0,
];

/// Chebyshev coefficients of `exp(x) sqrt(x) K1(x)` over `(2, inf)`.
const K1_B: [f64; 25] = [
    -5.75674448366501715755E-18,
    1.79405087314755922667E-17,
    -5.68946255844285935196E-17,
    1.83809354436663880070E-16,
    -6.05704724837331885336E-16,
    2.03870316562433424052E-15,
    -7.01983709041831346144E-15,
    2.47715442448130437068E-14,
    -8.97670518232499435011E-14,
    3.34841966607842919884E-13,
    -1.28917396095102890680E-12,
    5.13963967348173025100E-12,
    -2.12996783842756842877E-11,
    9.21831518760500529508E-11,
    -4.19035475934189648750E-10,
    2.01504975519703286596E-9,
    -1.03457624656780970260E-8,
    5.74108412545004946722E-8,
    -3.50196060308781257119E-7,
    2.40648494783721712015E-6,
    -1.93619797416608296024E-5,
    1.95215518471351631108E-4,
    -2.85781685962277938680E-3,
    1.03923736576817238437E-1,
    2.72062619048444266945E0,
];

/// `ndtri` for `|y - 0.5| <= 3/8`: numerator and denominator in `(y - 0.5)^2`.
const NDTRI_P0: [f64; 5] = [
    -5.99633501014107895267E1,
    9.80010754185999661536E1,
    -5.66762857469070293439E1,
    1.39312609387279679503E1,
    -1.23916583867381258016E0,
];
const NDTRI_Q0: [f64; 9] = [
    1.00000000000000000000E0,
    1.95448858338141759834E0,
    4.67627912898881538453E0,
    8.63602421390890590575E1,
    -2.25462687854119370527E2,
    2.00260212380060660359E2,
    -8.20372256168333339912E1,
    1.59056225126211695515E1,
    -1.18331621121330003142E0,
];
/// `ndtri` for `z = sqrt(-2 log y)` in `[2, 8)`, in `1 / z`.
const NDTRI_P1: [f64; 9] = [
    4.05544892305962419923E0,
    3.15251094599893866154E1,
    5.71628192246421288162E1,
    4.40805073893200834700E1,
    1.46849561928858024014E1,
    2.18663306850790267539E0,
    -1.40256079171354495875E-1,
    -3.50424626827848203418E-2,
    -8.57456785154685413611E-4,
];
const NDTRI_Q1: [f64; 9] = [
    1.00000000000000000000E0,
    1.57799883256466749731E1,
    4.53907635128879210584E1,
    4.13172038254672030440E1,
    1.50425385692907503408E1,
    2.50464946208309415979E0,
    -1.42182922854787788574E-1,
    -3.80806407691578277194E-2,
    -9.33259480895457427372E-4,
];
/// `ndtri` for `z` in `[8, 64]`.
const NDTRI_P2: [f64; 9] = [
    3.23774891776946035970E0,
    6.91522889068984211695E0,
    3.93881025292474443415E0,
    1.33303460815807542389E0,
    2.01485389549179081538E-1,
    1.23716634817820021358E-2,
    3.01581553508235416007E-4,
    2.65806974686737550832E-6,
    6.23974539184983293730E-9,
];
const NDTRI_Q2: [f64; 9] = [
    1.00000000000000000000E0,
    6.02427039364742014255E0,
    3.67983563856160859403E0,
    1.37702099489081330271E0,
    2.16236993594496635890E-1,
    1.34204006088543189037E-2,
    3.28014464682127739104E-4,
    2.89247864745380683936E-6,
    6.79019408009981274425E-9,
];

/// A constant of `like`'s type.
fn constant(cx: &mut Cx<'_>, like: ValueId, value: f64) -> Result<ValueId> {
    cx.splat_like(like, Scalar::Float(value))
}

/// `op(a, constant)`.
fn with(cx: &mut Cx<'_>, op: BinaryOp, a: ValueId, value: f64) -> Result<ValueId> {
    cx.binary_scalar(op, a, Scalar::Float(value))
}

/// Cephes' `chbevl`: the Chebyshev series of `coefficients` at `y`, by Clenshaw's recurrence in
/// its order (`b0 = y * b1 - b2 + c`, the result `(b0 - b2) / 2`).
fn chbevl(cx: &mut Cx<'_>, y: ValueId, coefficients: &[f64]) -> Result<ValueId> {
    let mut b0 = constant(cx, y, coefficients[0])?;
    let mut b1 = constant(cx, y, 0.0)?;
    let mut b2 = b1;
    for &c in &coefficients[1..] {
        b2 = b1;
        b1 = b0;
        let product = cx.binary(BinaryOp::Multiply, y, b1)?;
        let difference = cx.binary(BinaryOp::Subtract, product, b2)?;
        b0 = with(cx, BinaryOp::Add, difference, c)?;
    }
    let difference = cx.binary(BinaryOp::Subtract, b0, b2)?;
    with(cx, BinaryOp::Multiply, difference, 0.5)
}

/// Cephes' `polevl`: Horner's rule over `coefficients`, the highest power first.
fn polevl(cx: &mut Cx<'_>, x: ValueId, coefficients: &[f64]) -> Result<ValueId> {
    let mut result = constant(cx, x, 0.0)?;
    for &c in coefficients {
        let product = cx.binary(BinaryOp::Multiply, result, x)?;
        result = with(cx, BinaryOp::Add, product, c)?;
    }
    Ok(result)
}

/// `select(x <= limit, low, high)`.
fn split(cx: &mut Cx<'_>, x: ValueId, limit: f64, low: ValueId, high: ValueId) -> Result<ValueId> {
    let bound = constant(cx, x, limit)?;
    let below = cx.compare(CompareDirection::Le, x, bound)?;
    cx.select(below, low, high)
}

/// `exp(-|x|) I0(x)`.
fn i0e_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let x = cx.unary(UnaryOp::Abs, x)?;
    let half = with(cx, BinaryOp::Divide, x, 2.0)?;
    let y = with(cx, BinaryOp::Subtract, half, 2.0)?;
    let near = chbevl(cx, y, &I0_A)?;
    let far = far_series(cx, x, &I0_B)?;
    split(cx, x, 8.0, near, far)
}

/// `chbevl(32 / x - 2, coefficients) / sqrt(x)`: the series beyond 8.
fn far_series(cx: &mut Cx<'_>, x: ValueId, coefficients: &[f64]) -> Result<ValueId> {
    let thirty_two = constant(cx, x, 32.0)?;
    let ratio = cx.binary(BinaryOp::Divide, thirty_two, x)?;
    let y = with(cx, BinaryOp::Subtract, ratio, 2.0)?;
    let series = chbevl(cx, y, coefficients)?;
    let root = cx.unary(UnaryOp::Sqrt, x)?;
    cx.binary(BinaryOp::Divide, series, root)
}

/// `exp(-|x|) I1(x)` with the sign of `x`.
fn i1e_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let half = with(cx, BinaryOp::Divide, magnitude, 2.0)?;
    let y = with(cx, BinaryOp::Subtract, half, 2.0)?;
    let near = chbevl(cx, y, &I1_A)?;
    let near = cx.binary(BinaryOp::Multiply, near, magnitude)?;
    let far = far_series(cx, magnitude, &I1_B)?;
    let value = split(cx, magnitude, 8.0, near, far)?;
    let zero = constant(cx, x, 0.0)?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let flipped = cx.unary(UnaryOp::Negate, value)?;
    cx.select(negative, flipped, value)
}

/// `i0(x)` / `special_modified_bessel_i0(x)`: `exp(|x|)` times the scaled function.
fn i0_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let scaled = i0e_of(cx, x)?;
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let growth = cx.unary(UnaryOp::Exponential, magnitude)?;
    cx.binary(BinaryOp::Multiply, growth, scaled)
}

/// `special_modified_bessel_i1(x)`.
fn i1_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let scaled = i1e_of(cx, x)?;
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let growth = cx.unary(UnaryOp::Exponential, magnitude)?;
    cx.binary(BinaryOp::Multiply, scaled, growth)
}

/// `K0(x)` or `K1(x)` (`order`), scaled by `exp(x)` when `scaled`: the series near zero corrected
/// by `log(x / 2) I(x)`, the asymptotic series beyond 2; `inf` at 0 and NaN below it.
fn k_of(cx: &mut Cx<'_>, x: ValueId, order: u8, scaled: bool) -> Result<ValueId> {
    let (near_coefficients, far_coefficients): (&[f64], &[f64]) =
        if order == 0 { (&K0_A, &K0_B) } else { (&K1_A, &K1_B) };
    let square = cx.binary(BinaryOp::Multiply, x, x)?;
    let y = with(cx, BinaryOp::Subtract, square, 2.0)?;
    let series = chbevl(cx, y, near_coefficients)?;
    let half_x = with(cx, BinaryOp::Multiply, x, 0.5)?;
    let log = cx.unary(UnaryOp::Log, half_x)?;
    let mut near = if order == 0 {
        let i0 = i0_of(cx, x)?;
        let correction = cx.binary(BinaryOp::Multiply, log, i0)?;
        cx.binary(BinaryOp::Subtract, series, correction)?
    } else {
        let i1 = i1_of(cx, x)?;
        let correction = cx.binary(BinaryOp::Multiply, log, i1)?;
        let over_x = cx.binary(BinaryOp::Divide, series, x)?;
        cx.binary(BinaryOp::Add, correction, over_x)?
    };
    let eight = constant(cx, x, 8.0)?;
    let ratio = cx.binary(BinaryOp::Divide, eight, x)?;
    let far_y = with(cx, BinaryOp::Subtract, ratio, 2.0)?;
    let far_series = chbevl(cx, far_y, far_coefficients)?;
    let root = cx.unary(UnaryOp::Sqrt, x)?;
    let mut far = cx.binary(BinaryOp::Divide, far_series, root)?;
    if scaled {
        let growth = cx.unary(UnaryOp::Exponential, x)?;
        near = cx.binary(BinaryOp::Multiply, near, growth)?;
    } else {
        let minus = cx.unary(UnaryOp::Negate, x)?;
        let decay = cx.unary(UnaryOp::Exponential, minus)?;
        far = cx.binary(BinaryOp::Multiply, decay, far)?;
    }
    let value = split(cx, x, 2.0, near, far)?;
    let zero = constant(cx, x, 0.0)?;
    let infinity = constant(cx, x, f64::INFINITY)?;
    let nan = constant(cx, x, f64::NAN)?;
    let at_zero = cx.compare(CompareDirection::Eq, x, zero)?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let value = cx.select(negative, nan, value)?;
    cx.select(at_zero, infinity, value)
}

/// The modified Bessel functions: which one an overload computes.
#[derive(Copy, Clone)]
pub(super) enum Bessel {
    I0,
    I0e,
    I1,
    K0,
    K1,
    K0e,
    K1e,
}

/// `i0`, `special_i0e`, `special_modified_bessel_i0/i1/k0/k1`, `special_scaled_modified_bessel_k0/k1`.
pub(super) fn bessel(cx: &mut Cx<'_>, args: &Args, which: Bessel) -> Result<Imported> {
    // The scaled `K` overloads name their operand `x`.
    let x = if args.has_param("x") { args.tensor("x")? } else { args.tensor("self")? };
    tensor(apply_float(cx, x, |cx, x| match which {
        Bessel::I0 => i0_of(cx, x),
        Bessel::I0e => i0e_of(cx, x),
        Bessel::I1 => i1_of(cx, x),
        Bessel::K0 => k_of(cx, x, 0, false),
        Bessel::K1 => k_of(cx, x, 1, false),
        Bessel::K0e => k_of(cx, x, 0, true),
        Bessel::K1e => k_of(cx, x, 1, true),
    })?)
}

/// `special_ndtri(p)`: the `x` whose standard normal distribution function is `p`, as Cephes'
/// `ndtri`: a rational function of `p - 0.5` in the middle, of `1 / sqrt(-2 log p)` in the tails
/// (two ranges), `-inf`/`inf` at 0 and 1, NaN outside `[0, 1]`.
pub(super) fn ndtri(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, p| {
        const EXP_MINUS_2: f64 = 0.13533528323661269189;
        let one = constant(cx, p, 1.0)?;
        let upper = constant(cx, p, 1.0 - EXP_MINUS_2)?;
        let flip = cx.compare(CompareDirection::Gt, p, upper)?;
        let complement = cx.binary(BinaryOp::Subtract, one, p)?;
        let y = cx.select(flip, complement, p)?;
        // The middle: y - 0.5 times a rational function of its square.
        let centred = with(cx, BinaryOp::Subtract, y, 0.5)?;
        let square = cx.binary(BinaryOp::Multiply, centred, centred)?;
        let numerator = polevl(cx, square, &NDTRI_P0)?;
        let denominator = polevl(cx, square, &NDTRI_Q0)?;
        let ratio = cx.binary(BinaryOp::Divide, numerator, denominator)?;
        let ratio = cx.binary(BinaryOp::Multiply, square, ratio)?;
        let ratio = cx.binary(BinaryOp::Multiply, centred, ratio)?;
        let middle = cx.binary(BinaryOp::Add, centred, ratio)?;
        let middle = with(cx, BinaryOp::Multiply, middle, 2.50662827463100050242)?;
        // The tails: z = sqrt(-2 log y), x = z - log(z) / z - (a rational function of 1 / z).
        let log = cx.unary(UnaryOp::Log, y)?;
        let scaled = with(cx, BinaryOp::Multiply, log, -2.0)?;
        let z = cx.unary(UnaryOp::Sqrt, scaled)?;
        let log_z = cx.unary(UnaryOp::Log, z)?;
        let shift = cx.binary(BinaryOp::Divide, log_z, z)?;
        let x0 = cx.binary(BinaryOp::Subtract, z, shift)?;
        let inverse = cx.binary(BinaryOp::Divide, one, z)?;
        let mut tails = Vec::with_capacity(2);
        for (p_coefficients, q_coefficients) in [(&NDTRI_P1, &NDTRI_Q1), (&NDTRI_P2, &NDTRI_Q2)] {
            let numerator = polevl(cx, inverse, p_coefficients)?;
            let denominator = polevl(cx, inverse, q_coefficients)?;
            let ratio = cx.binary(BinaryOp::Divide, numerator, denominator)?;
            tails.push(cx.binary(BinaryOp::Multiply, inverse, ratio)?);
        }
        let eight = constant(cx, z, 8.0)?;
        let near = cx.compare(CompareDirection::Lt, z, eight)?;
        let x1 = cx.select(near, tails[0], tails[1])?;
        let tail = cx.binary(BinaryOp::Subtract, x0, x1)?;
        let lower_tail = cx.unary(UnaryOp::Negate, tail)?;
        let tail = cx.select(flip, tail, lower_tail)?;
        let lower = constant(cx, y, EXP_MINUS_2)?;
        let in_middle = cx.compare(CompareDirection::Gt, y, lower)?;
        let value = cx.select(in_middle, middle, tail)?;
        // The edges.
        let zero = constant(cx, p, 0.0)?;
        let nan = constant(cx, p, f64::NAN)?;
        let infinity = constant(cx, p, f64::INFINITY)?;
        let minus_infinity = constant(cx, p, f64::NEG_INFINITY)?;
        let below = cx.compare(CompareDirection::Lt, p, zero)?;
        let above = cx.compare(CompareDirection::Gt, p, one)?;
        let outside = cx.binary(BinaryOp::Or, below, above)?;
        let value = cx.select(outside, nan, value)?;
        let at_zero = cx.compare(CompareDirection::Eq, p, zero)?;
        let value = cx.select(at_zero, minus_infinity, value)?;
        let at_one = cx.compare(CompareDirection::Eq, p, one)?;
        cx.select(at_one, infinity, value)
    })?)
}

/// `special_erfcx(x)`: `exp(x^2) erfc(x)`, computed in `f64` (exact to well below `f32`'s
/// precision, and to about 1e-13 relative in `f64`, where `exp` of a rounded `x^2` dominates) up to
/// `|x| = 26` and by its continued fraction beyond, which PyTorch's kernel also uses past 50
/// (`ispi (x^4 + 4.5 x^2 + 2) / (x (x^4 + 5 x^2 + 3.75))`, whose error at 26 is below 1e-14);
/// `inf` below -26.7, where `2 exp(x^2)` overflows.
pub(super) fn erfcx(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let out = super::elementwise::float_dtype(cx, x);
    let x = cx.convert(x, DType::F64)?;
    let square = cx.binary(BinaryOp::Multiply, x, x)?;
    let growth = cx.unary(UnaryOp::Exponential, square)?;
    let tail = cx.unary(UnaryOp::Erfc, x)?;
    let direct = cx.binary(BinaryOp::Multiply, growth, tail)?;
    // ispi * ((x*x) * (x*x + 4.5) + 2) / (x * ((x*x) * (x*x + 5) + 3.75)).
    let a = with(cx, BinaryOp::Add, square, 4.5)?;
    let a = cx.binary(BinaryOp::Multiply, square, a)?;
    let a = with(cx, BinaryOp::Add, a, 2.0)?;
    let a = with(cx, BinaryOp::Multiply, a, 0.56418958354775628694807945156)?;
    let b = with(cx, BinaryOp::Add, square, 5.0)?;
    let b = cx.binary(BinaryOp::Multiply, square, b)?;
    let b = with(cx, BinaryOp::Add, b, 3.75)?;
    let b = cx.binary(BinaryOp::Multiply, x, b)?;
    let fraction = cx.binary(BinaryOp::Divide, a, b)?;
    let far = constant(cx, x, 26.0)?;
    let beyond = cx.compare(CompareDirection::Gt, x, far)?;
    let value = cx.select(beyond, fraction, direct)?;
    // Past 5e7 PyTorch keeps the first term, ispi / x, where the fraction's powers overflow.
    let huge = constant(cx, x, 5e7)?;
    let past = cx.compare(CompareDirection::Gt, x, huge)?;
    let ispi = constant(cx, x, 0.56418958354775628694807945156)?;
    let first = cx.binary(BinaryOp::Divide, ispi, x)?;
    let value = cx.select(past, first, value)?;
    tensor(cx.convert(value, out)?)
}

/// The asymptotic series of `J0`/`Y0` beyond 5, in `25 / x^2`.
const J0_PP: [f64; 7] = [
    7.96936729297347051624E-4,
    8.28352392107440799803E-2,
    1.23953371646414299388E0,
    5.44725003058768775090E0,
    8.74716500199817011941E0,
    5.30324038235394892183E0,
    9.99999999999999997821E-1,
];
const J0_PQ: [f64; 7] = [
    9.24408810558863637013E-4,
    8.56288474354474431428E-2,
    1.25352743901058953537E0,
    5.47097740330417105182E0,
    8.76190883237069594232E0,
    5.30605288235394617618E0,
    1.00000000000000000218E0,
];
const J0_QP: [f64; 8] = [
    -1.13663838898469149931E-2,
    -1.28252718670509318512E0,
    -1.95539544257735972385E1,
    -9.32060152123768231369E1,
    -1.77681167980488050595E2,
    -1.47077505154951170175E2,
    -5.14105326766599330220E1,
    -6.05014350600728481186E0,
];
const J0_QQ: [f64; 7] = [
    6.43178256118178023184E1,
    8.56430025976980587198E2,
    3.88240183605401609683E3,
    7.24046774195652478189E3,
    5.93072701187316984827E3,
    2.06209331660327847417E3,
    2.42005740240291393179E2,
];
/// `J0` up to 5: a rational function of `x^2` times its first two zeros' factors.
const J0_RP: [f64; 4] =
    [-4.79443220978201773821E9, 1.95617491946556577543E12, -2.49248344360967716204E14, 9.70862251047306323952E15];
const J0_RQ: [f64; 8] = [
    4.99563147152651017219E2,
    1.73785401676374683123E5,
    4.84409658339962045305E7,
    1.11855537045356834862E10,
    2.11277520115489217587E12,
    3.10518229857422583814E14,
    3.18121955943204943306E16,
    1.71086294081043136091E18,
];
/// `Y0` up to 5, less `2/pi log(x) J0(x)`.
const Y0_YP: [f64; 8] = [
    1.55924367855235737965E4,
    -1.46639295903971606143E7,
    5.43526477051876500413E9,
    -9.82136065717911466409E11,
    8.75906394395366999549E13,
    -3.46628303384729719441E15,
    4.42733268572569800351E16,
    -1.84950800436986690637E16,
];
const Y0_YQ: [f64; 7] = [
    1.04128353664259848412E3,
    6.26107330137134956842E5,
    2.68919633393814121987E8,
    8.64002487103935000337E10,
    2.02979612750105546709E13,
    3.17157752842975028269E15,
    2.50596256172653059228E17,
];
/// The asymptotic series of `J1`/`Y1` beyond 5.
const J1_PP: [f64; 7] = [
    7.62125616208173112003E-4,
    7.31397056940917570436E-2,
    1.12719608129684925192E0,
    5.11207951146807644818E0,
    8.42404590141772420927E0,
    5.21451598682361504063E0,
    1.00000000000000000254E0,
];
const J1_PQ: [f64; 7] = [
    5.71323128072548699714E-4,
    6.88455908754495404082E-2,
    1.10514232634061696926E0,
    5.07386386128601488557E0,
    8.39985554327604159757E0,
    5.20982848682361821619E0,
    9.99999999999999997461E-1,
];
const J1_QP: [f64; 8] = [
    5.10862594750176621635E-2,
    4.98213872951233449420E0,
    7.58238284132545283818E1,
    3.66779609360150777800E2,
    7.10856304998926107277E2,
    5.97489612400613639965E2,
    2.11688757100572135698E2,
    2.52070205858023719784E1,
];
const J1_QQ: [f64; 7] = [
    7.42373277035675149943E1,
    1.05644886038262816351E3,
    4.98641058337653607651E3,
    9.56231892404756170795E3,
    7.99704160447350683650E3,
    2.82619278517639096600E3,
    3.36093607810698293419E2,
];
/// `J1` up to 5.
const J1_RP: [f64; 4] =
    [-8.99971225705559398224E8, 4.52228297998194034323E11, -7.27494245221818276015E13, 3.68295732863852883286E15];
const J1_RQ: [f64; 8] = [
    6.20836478118054335476E2,
    2.56987256757748830383E5,
    8.35146791431949253037E7,
    2.21511595479792499675E10,
    4.74914122079991414898E12,
    7.84369607876235854894E14,
    8.95222336184627338078E16,
    5.32278620332680085395E18,
];
/// `Y1` up to 5, less `2/pi (J1(x) log(x) - 1/x)`, over `x`.
const Y1_YP: [f64; 6] = [
    1.26320474790178026440E9,
    -6.47355876379160291031E11,
    1.14509511541823727583E14,
    -8.12770255501325109621E15,
    2.02439475713594898196E17,
    -7.78877196265950026825E17,
];
const Y1_YQ: [f64; 8] = [
    5.94301592346128195359E2,
    2.35564092943068577943E5,
    7.34811944459721705660E7,
    1.87601316108706159478E10,
    3.88231277496238566008E12,
    6.20557727146953693363E14,
    6.87141087355300489866E16,
    3.97270608116560655612E18,
];

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f64 = 0.797884560802865355879892119868763737;
/// `2 / pi`.
const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;

/// The Bessel functions of the first and second kind of orders 0 and 1.
#[derive(Copy, Clone, PartialEq)]
pub(super) enum Kind {
    J0,
    J1,
    Y0,
    Y1,
}

/// `polevl(z, p) / polevl(z, q)`.
fn ratio(cx: &mut Cx<'_>, z: ValueId, p: &[f64], q: &[f64]) -> Result<ValueId> {
    let numerator = polevl(cx, z, p)?;
    let denominator = polevl(cx, z, q)?;
    cx.binary(BinaryOp::Divide, numerator, denominator)
}

/// The asymptotic form beyond 5: `(P cos(x - phase) -+ 5/x Q sin(x - phase)) sqrt(2/pi) / sqrt(x)`
/// (`J`), or with sine and cosine exchanged (`Y`).
fn asymptotic(cx: &mut Cx<'_>, x: ValueId, order: u8, second_kind: bool) -> Result<ValueId> {
    let (pp, pq, qp, qq): (&[f64], &[f64], &[f64], &[f64]) =
        if order == 0 { (&J0_PP, &J0_PQ, &J0_QP, &J0_QQ) } else { (&J1_PP, &J1_PQ, &J1_QP, &J1_QQ) };
    let z = if order == 0 {
        let square = cx.binary(BinaryOp::Multiply, x, x)?;
        let twenty_five = constant(cx, x, 25.0)?;
        cx.binary(BinaryOp::Divide, twenty_five, square)?
    } else {
        let five = constant(cx, x, 5.0)?;
        let w = cx.binary(BinaryOp::Divide, five, x)?;
        cx.binary(BinaryOp::Multiply, w, w)?
    };
    let p = ratio(cx, z, pp, pq)?;
    let q = ratio(cx, z, qp, qq)?;
    // pi / 4 and 3 pi / 4 (Cephes' literal of the latter, which rounds to the f64 nearest it).
    let phase = if order == 0 { std::f64::consts::FRAC_PI_4 } else { 2.356_194_490_192_345 };
    let shifted = with(cx, BinaryOp::Subtract, x, phase)?;
    let cos = cx.unary(UnaryOp::Cosine, shifted)?;
    let sin = cx.unary(UnaryOp::Sine, shifted)?;
    let five = constant(cx, x, 5.0)?;
    let five_over_x = cx.binary(BinaryOp::Divide, five, x)?;
    let q = cx.binary(BinaryOp::Multiply, five_over_x, q)?;
    let sum = if second_kind {
        let a = cx.binary(BinaryOp::Multiply, p, sin)?;
        let b = cx.binary(BinaryOp::Multiply, q, cos)?;
        cx.binary(BinaryOp::Add, a, b)?
    } else {
        let a = cx.binary(BinaryOp::Multiply, p, cos)?;
        let b = cx.binary(BinaryOp::Multiply, q, sin)?;
        cx.binary(BinaryOp::Subtract, a, b)?
    };
    let scaled = with(cx, BinaryOp::Multiply, sum, SQRT_2_OVER_PI)?;
    let root = cx.unary(UnaryOp::Sqrt, x)?;
    cx.binary(BinaryOp::Divide, scaled, root)
}

/// `J0(x)` for `x >= 0`.
fn j0_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let square = cx.binary(BinaryOp::Multiply, x, x)?;
    let r = ratio(cx, square, &J0_RP, &J0_RQ)?;
    let first = with(cx, BinaryOp::Subtract, square, 5.78318596294678452118E0)?;
    let second = with(cx, BinaryOp::Subtract, square, 3.04712623436620863991E1)?;
    let near = cx.binary(BinaryOp::Multiply, first, second)?;
    let near = cx.binary(BinaryOp::Multiply, near, r)?;
    // Below 1e-5: 1 - x^2 / 4.
    let quarter = with(cx, BinaryOp::Divide, square, 4.0)?;
    let one = constant(cx, x, 1.0)?;
    let tiny_value = cx.binary(BinaryOp::Subtract, one, quarter)?;
    let tiny = constant(cx, x, 1e-5)?;
    let is_tiny = cx.compare(CompareDirection::Lt, x, tiny)?;
    let near = cx.select(is_tiny, tiny_value, near)?;
    let far = asymptotic(cx, x, 0, false)?;
    split(cx, x, 5.0, near, far)
}

/// `J1(x)` for `x >= 0`.
fn j1_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let square = cx.binary(BinaryOp::Multiply, x, x)?;
    let r = ratio(cx, square, &J1_RP, &J1_RQ)?;
    let near = cx.binary(BinaryOp::Multiply, r, x)?;
    let first = with(cx, BinaryOp::Subtract, square, 1.46819706421238932572E1)?;
    let near = cx.binary(BinaryOp::Multiply, near, first)?;
    let second = with(cx, BinaryOp::Subtract, square, 4.92184563216946036703E1)?;
    let near = cx.binary(BinaryOp::Multiply, near, second)?;
    let far = asymptotic(cx, x, 1, false)?;
    split(cx, x, 5.0, near, far)
}

/// `special_bessel_j0/j1/y0/y1(x)`: Cephes' rational approximations up to 5 and asymptotic forms
/// beyond (`J0` even, `J1` odd; `Y` is `-inf` at 0 and NaN below).
pub(super) fn bessel_jy(cx: &mut Cx<'_>, args: &Args, kind: Kind) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let magnitude = cx.unary(UnaryOp::Abs, x)?;
        match kind {
            Kind::J0 => j0_of(cx, magnitude),
            Kind::J1 => {
                let value = j1_of(cx, magnitude)?;
                let zero = constant(cx, x, 0.0)?;
                let negative = cx.compare(CompareDirection::Lt, x, zero)?;
                let flipped = cx.unary(UnaryOp::Negate, value)?;
                cx.select(negative, flipped, value)
            }
            Kind::Y0 | Kind::Y1 => {
                let square = cx.binary(BinaryOp::Multiply, x, x)?;
                let log = cx.unary(UnaryOp::Log, x)?;
                let near = if kind == Kind::Y0 {
                    let r = ratio(cx, square, &Y0_YP, &Y0_YQ)?;
                    let j0 = j0_of(cx, magnitude)?;
                    let term = with(cx, BinaryOp::Multiply, log, TWO_OVER_PI)?;
                    let term = cx.binary(BinaryOp::Multiply, term, j0)?;
                    cx.binary(BinaryOp::Add, r, term)?
                } else {
                    let r = ratio(cx, square, &Y1_YP, &Y1_YQ)?;
                    let r = cx.binary(BinaryOp::Multiply, x, r)?;
                    let j1 = j1_of(cx, magnitude)?;
                    let product = cx.binary(BinaryOp::Multiply, j1, log)?;
                    let one = constant(cx, x, 1.0)?;
                    let inverse = cx.binary(BinaryOp::Divide, one, x)?;
                    let difference = cx.binary(BinaryOp::Subtract, product, inverse)?;
                    let term = with(cx, BinaryOp::Multiply, difference, TWO_OVER_PI)?;
                    cx.binary(BinaryOp::Add, r, term)?
                };
                let far = asymptotic(cx, x, if kind == Kind::Y0 { 0 } else { 1 }, true)?;
                let value = split(cx, x, 5.0, near, far)?;
                let zero = constant(cx, x, 0.0)?;
                let nan = constant(cx, x, f64::NAN)?;
                let minus_infinity = constant(cx, x, f64::NEG_INFINITY)?;
                let negative = cx.compare(CompareDirection::Lt, x, zero)?;
                let value = cx.select(negative, nan, value)?;
                let at_zero = cx.compare(CompareDirection::Eq, x, zero)?;
                cx.select(at_zero, minus_infinity, value)
            }
        }
    })?)
}

/// `special_spherical_bessel_j0(x)`: `sin(x) / x`, by its Taylor series below 0.5 and 0 at the
/// infinities, as PyTorch computes it.
pub(super) fn spherical_j0(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("x")?;
    tensor(apply_float(cx, x, |cx, x| {
        let sin = cx.unary(UnaryOp::Sine, x)?;
        let far = cx.binary(BinaryOp::Divide, sin, x)?;
        // 1 + x^2 (-1/6 + x^2 (1/120 + x^2 (-1/5040 + x^2 (1/362880 + x^2 (-1/39916800 + x^2 / 6227020800))))).
        let square = cx.binary(BinaryOp::Multiply, x, x)?;
        let mut series = constant(cx, x, 1.0 / 6227020800.0)?;
        for c in [-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0] {
            let product = cx.binary(BinaryOp::Multiply, square, series)?;
            series = with(cx, BinaryOp::Add, product, c)?;
        }
        let magnitude = cx.unary(UnaryOp::Abs, x)?;
        let half = constant(cx, x, 0.5)?;
        let small = cx.compare(CompareDirection::Lt, magnitude, half)?;
        let value = cx.select(small, series, far)?;
        let infinity = constant(cx, x, f64::INFINITY)?;
        let infinite = cx.compare(CompareDirection::Eq, magnitude, infinity)?;
        let zero = constant(cx, x, 0.0)?;
        cx.select(infinite, zero, value)
    })?)
}

/// `Ai` beyond 2.09: `an / ad` in `1 / zeta`.
const AIRY_AN: [f64; 8] = [
    3.46538101525629032477E-1,
    1.20075952739645805542E1,
    7.62796053615234516538E1,
    1.68089224934630576269E2,
    1.59756391350164413639E2,
    7.05360906840444183113E1,
    1.40264691163389668864E1,
    9.99999999999999995305E-1,
];
const AIRY_AD: [f64; 8] = [
    5.67594532638770212846E-1,
    1.47562562584847203173E1,
    8.45138970141474626562E1,
    1.77318088145400459522E2,
    1.64234692871529701831E2,
    7.14778400825575695274E1,
    1.40959135607834029598E1,
    1.00000000000000000470E0,
];
/// `Ai` below -2.09: the amplitude and phase corrections in `z^2`.
const AIRY_AFN: [f64; 9] = [
    -1.31696323418331795333E-1,
    -6.26456544431912369773E-1,
    -6.93158036036933542233E-1,
    -2.79779981545119124951E-1,
    -4.91900132609500318020E-2,
    -4.06265923594885404393E-3,
    -1.59276496239262096340E-4,
    -2.77649108155232920844E-6,
    -1.67787698489114633780E-8,
];
const AIRY_AFD: [f64; 9] = [
    1.33560420706553243746E1,
    3.26825032795224613948E1,
    2.67367040941499554804E1,
    9.18707402907259625840E0,
    1.47529146771666414581E0,
    1.15687173795188044134E-1,
    4.40291641615211203805E-3,
    7.54720348287414296618E-5,
    4.51850092970580378464E-7,
];
const AIRY_AGN: [f64; 11] = [
    1.97339932091685679179E-2,
    3.91103029615688277255E-1,
    1.06579897599595591108E0,
    9.39169229816650230044E-1,
    3.51465656105547619242E-1,
    6.33888919628925490927E-2,
    5.85804113048388458567E-3,
    2.82851600836737019778E-4,
    6.98793669997260967291E-6,
    8.11789239554389293311E-8,
    3.41551784765923618484E-10,
];
const AIRY_AGD: [f64; 10] = [
    9.30892908077441974853E0,
    1.98352928718312140417E1,
    1.55646628932864612953E1,
    5.47686069422975497931E0,
    9.54293611618961883998E-1,
    8.64580826352392193095E-2,
    4.12656523824222607191E-3,
    1.01259085116509135510E-4,
    1.17166733214413521882E-6,
    4.91834570062930015649E-9,
];

/// Terms of `Ai`'s power series around 0 summed where `|x| < 2.09`: past about 25 terms the
/// next ones are below `f64`'s precision of the sum (PyTorch stops at the first such term), so
/// more change nothing.
const AIRY_TERMS: usize = 30;

/// `1 / sqrt(pi)`.
const FRAC_1_SQRT_PI: f64 = 5.64189583547756286948E-1;

/// `special_airy_ai(x)`: Cephes' `airy` for `Ai` (the oscillating asymptotic form below -2.09,
/// the power series between, the decaying form from 2.09 on; 0 past 103.892, NaN at the
/// infinities).
pub(super) fn airy_ai(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("x")?;
    tensor(apply_float(cx, x, |cx, x| {
        let one = constant(cx, x, 1.0)?;
        let magnitude = cx.unary(UnaryOp::Abs, x)?;
        let root_magnitude = cx.unary(UnaryOp::Sqrt, magnitude)?;
        // Below -2.09: t = -2 x sqrt(-x) / 3, z = 1 / t.
        let t = cx.binary(BinaryOp::Multiply, x, root_magnitude)?;
        let t = with(cx, BinaryOp::Multiply, t, -2.0)?;
        let t = with(cx, BinaryOp::Divide, t, 3.0)?;
        let z = cx.binary(BinaryOp::Divide, one, t)?;
        let z2 = cx.binary(BinaryOp::Multiply, z, z)?;
        let afn = polevl(cx, z2, &AIRY_AFN)?;
        let afd = polevl(cx, z2, &AIRY_AFD)?;
        let agn = polevl(cx, z2, &AIRY_AGN)?;
        let agd = polevl(cx, z2, &AIRY_AGD)?;
        let phase = with(cx, BinaryOp::Add, t, 0.25 * std::f64::consts::PI)?;
        let sin = cx.unary(UnaryOp::Sine, phase)?;
        let cos = cx.unary(UnaryOp::Cosine, phase)?;
        let f = cx.binary(BinaryOp::Divide, afn, afd)?;
        let f = cx.binary(BinaryOp::Multiply, z2, f)?;
        let f = cx.binary(BinaryOp::Add, one, f)?;
        let f = cx.binary(BinaryOp::Multiply, sin, f)?;
        let g = cx.binary(BinaryOp::Divide, agn, agd)?;
        let g = cx.binary(BinaryOp::Multiply, z, g)?;
        let g = cx.binary(BinaryOp::Multiply, cos, g)?;
        let wave = cx.binary(BinaryOp::Subtract, f, g)?;
        let quarter_root = cx.unary(UnaryOp::Sqrt, root_magnitude)?;
        let amplitude = constant(cx, x, FRAC_1_SQRT_PI)?;
        let amplitude = cx.binary(BinaryOp::Divide, amplitude, quarter_root)?;
        let oscillating = cx.binary(BinaryOp::Multiply, amplitude, wave)?;
        // From 2.09: zeta = 2 x sqrt(x) / 3, Ai = (an / ad) / (2 sqrt(pi) x^(1/4) exp(zeta)).
        let zeta = cx.binary(BinaryOp::Multiply, x, root_magnitude)?;
        let zeta = with(cx, BinaryOp::Multiply, zeta, 2.0)?;
        let zeta = with(cx, BinaryOp::Divide, zeta, 3.0)?;
        let inverse = cx.binary(BinaryOp::Divide, one, zeta)?;
        let an = polevl(cx, inverse, &AIRY_AN)?;
        let ad = polevl(cx, inverse, &AIRY_AD)?;
        let ratio = cx.binary(BinaryOp::Divide, an, ad)?;
        let ratio = with(cx, BinaryOp::Multiply, ratio, FRAC_1_SQRT_PI)?;
        let growth = cx.unary(UnaryOp::Exponential, zeta)?;
        let denominator = with(cx, BinaryOp::Multiply, quarter_root, 2.0)?;
        let denominator = cx.binary(BinaryOp::Multiply, denominator, growth)?;
        let decaying = cx.binary(BinaryOp::Divide, ratio, denominator)?;
        // The power series: f and g accumulate the two fundamental solutions.
        let mut f = one;
        let mut g = x;
        let mut k = 1.0;
        let mut m = one;
        let mut n = x;
        let cube = cx.binary(BinaryOp::Multiply, x, x)?;
        let cube = cx.binary(BinaryOp::Multiply, cube, x)?;
        for _ in 0..AIRY_TERMS {
            m = cx.binary(BinaryOp::Multiply, m, cube)?;
            k += 1.0;
            m = with(cx, BinaryOp::Divide, m, k)?;
            n = cx.binary(BinaryOp::Multiply, n, cube)?;
            k += 1.0;
            n = with(cx, BinaryOp::Divide, n, k)?;
            m = with(cx, BinaryOp::Divide, m, k)?;
            f = cx.binary(BinaryOp::Add, f, m)?;
            k += 1.0;
            n = with(cx, BinaryOp::Divide, n, k)?;
            g = cx.binary(BinaryOp::Add, g, n)?;
        }
        let f = with(cx, BinaryOp::Multiply, f, 0.355028053887817239260)?;
        let g = with(cx, BinaryOp::Multiply, g, 0.258819403792806798405)?;
        let series = cx.binary(BinaryOp::Subtract, f, g)?;
        let low = constant(cx, x, -2.09)?;
        let below = cx.compare(CompareDirection::Lt, x, low)?;
        let value = cx.select(below, oscillating, series)?;
        let high = constant(cx, x, 2.09)?;
        let above = cx.compare(CompareDirection::Ge, x, high)?;
        let value = cx.select(above, decaying, value)?;
        let far = constant(cx, x, 103.892)?;
        let beyond = cx.compare(CompareDirection::Gt, x, far)?;
        let zero = constant(cx, x, 0.0)?;
        let value = cx.select(beyond, zero, value)?;
        let infinity = constant(cx, x, f64::INFINITY)?;
        let infinite = cx.compare(CompareDirection::Eq, magnitude, infinity)?;
        let nan = constant(cx, x, f64::NAN)?;
        cx.select(infinite, nan, value)
    })?)
}
